"""`python -m attention_atlas.model.core.attention.native`: build the CPU kernel now (`make` does), not on a person's
first run."""

import sys

from attention_atlas.model.core.attention.native import attention_rows

built = attention_rows() is not None
print("The native kernel is built." if built else "No native kernel here: torch ops do the work.")
sys.exit(0)
