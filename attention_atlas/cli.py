"""`attention-atlas`: start the app, e.g. `attention-atlas --port 8600 --model /path/to/hf/folder`.

Options this command does not know are handed to `streamlit run` (e.g. `--server.maxUploadSize 50`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from attention_atlas.ui.url_state import OPEN_MODEL_VARIABLE

FRAME = Path(__file__).resolve().parent / "app.py"  # the script Streamlit runs, with its .streamlit/ beside it


def streamlit_arguments(argv: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The `streamlit` command line for these arguments, and the environment variables the app reads."""
    parser = argparse.ArgumentParser(prog="attention-atlas", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8501, help="the port to serve on (default 8501)")
    parser.add_argument("--address", default="localhost",
                        help="the address to serve on (default localhost; 0.0.0.0 serves every network interface)")
    parser.add_argument("--model", help="the model a new session opens on: a model id (toy-reverse, minilm, smollm2) "
                                        "or a Hugging Face model folder")
    parser.add_argument("--headless", action="store_true", help="do not open a browser tab")
    args, streamlit_options = parser.parse_known_args(argv)
    command = ["run", str(FRAME), "--server.port", str(args.port), "--server.address", args.address,
               *(["--server.headless", "true"] if args.headless else []), *streamlit_options]
    environment = {OPEN_MODEL_VARIABLE: args.model} if args.model else {}
    return command, environment


def main(argv: list[str] | None = None) -> int:
    """Start the app's server; returns when it stops. The CPU kernel is built first (once a machine), so that no
    person's first run waits for it."""
    from streamlit.web import cli as streamlit_cli  # imports the whole of Streamlit: after the arguments parsed

    from attention_atlas.model.core.attention.native import attention_rows

    command, environment = streamlit_arguments(argv)
    attention_rows()
    os.environ.update(environment)
    streamlit_cli.main(args=command, prog_name="attention-atlas", standalone_mode=False)
    return 0
