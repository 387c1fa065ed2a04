"""`python -m attention_atlas`: the same as the `attention-atlas` command."""

import sys

from attention_atlas.cli import main

sys.exit(main())
