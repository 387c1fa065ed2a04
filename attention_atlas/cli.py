"""`attention-atlas`: serve the app, e.g. `attention-atlas --port 8600 --model /path/to/hf/folder`, or open it on a
saved trace: `attention-atlas --trace trace.npz`. Options this command does not know are handed to `streamlit run`
(e.g. `--server.maxUploadSize 50`).

commands:
  attention-atlas trace --model toy-reverse --text "hello" --out t.npz   run a model on text, save its trace
  attention-atlas train --task reverse [--out DIR]                       train a toy model on the CPU
  attention-atlas train --all                                            retrain every shipped toy model
  attention-atlas explain --model toy-induction --text qwertyuiop --layer 1 --head 2 --query 14 --key 5
                                                                         why a head attends there
  attention-atlas circuit --model smollm2 --clean TEXT --corrupted TEXT --answer " Mary" --wrong " John"
                                                                         the edges that carry a prediction (EAP-IG)
  (`attention-atlas trace --help`, `attention-atlas train --help`, `attention-atlas explain --help`: their options)
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

FRAME = Path(__file__).resolve().parent / "app.py"  # the script Streamlit runs, with its .streamlit/ beside it
COMMANDS = {"trace": "attention_atlas.trace_command", "train": "attention_atlas.model.toy.train",  # name -> its main
            "attribute": "attention_atlas.attribute_command", "explain": "attention_atlas.explain_command",
            "circuit": "attention_atlas.circuit_command"}
USAGE = """%(prog)s [-h] [--port PORT] [--address ADDRESS] [--model MODEL] [--trace FILE] [--headless]
                       [streamlit options ...]
       %(prog)s trace [-h] [--list] [--model MODEL] [--text TEXT] [--out FILE] ...
       %(prog)s train [-h] (--task TASK [--out DIR] | --all) ...
       %(prog)s attribute [-h] --model MODEL --text TEXT --answer TOKEN [--wrong TOKEN] [--out FILE] ...
       %(prog)s explain [-h] --model MODEL --text TEXT --layer L --head H --query I --key J [--out FILE] ...
       %(prog)s circuit [-h] --model MODEL --clean TEXT --corrupted TEXT --answer TOKEN --wrong TOKEN
                        [--method EAP|EAP-IG] [--steps N] [--out FILE] ..."""


class TraceFileError(ValueError):
    """A --trace file that is missing or is not a trace file; the message says which, in a sentence."""


def streamlit_arguments(argv: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The `streamlit` command line for these arguments, and the environment variables the app reads. A --trace
    file that is not a readable trace file exits 2 with a sentence, before any server starts."""
    parser = argparse.ArgumentParser(prog="attention-atlas", usage=USAGE, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8501, help="the port to serve on (default 8501)")
    parser.add_argument("--address", default="localhost",
                        help="the address to serve on (default localhost; 0.0.0.0 serves every network interface)")
    parser.add_argument("--model", help="the model a new session opens on: a model id (toy-reverse, minilm, smollm2) "
                                        "or a Hugging Face model folder")
    parser.add_argument("--trace", metavar="FILE",
                        help="the trace file a new session opens on (as `attention-atlas trace --out` writes one)")
    parser.add_argument("--headless", action="store_true", help="do not open a browser tab")
    args, streamlit_options = parser.parse_known_args(argv)
    trace = None
    if args.trace is not None:
        try:
            trace = checked_trace_file(args.trace)
        except TraceFileError as error:
            parser.exit(2, f"attention-atlas: error: --trace: {error}\n")  # a file, not the usage, is wrong
    # ui/url_state.py imports Streamlit: read its names only once the arguments are known to be good
    from attention_atlas.ui.url_state import OPEN_MODEL_VARIABLE, TRACE_FILE_VARIABLE

    command = ["run", str(FRAME), "--server.port", str(args.port), "--server.address", args.address,
               *(["--server.headless", "true"] if args.headless else []), *streamlit_options]
    environment = {OPEN_MODEL_VARIABLE: args.model} if args.model else {}
    environment |= {TRACE_FILE_VARIABLE: str(trace)} if trace is not None else {}
    return command, environment


def checked_trace_file(path: str) -> Path:
    """The absolute path of a trace file this version reads (read once, as the app will); TraceFileError with a
    sentence for a path that is missing, not a file, or not a trace file."""
    from attention_atlas.api import load_trace  # numpy and torch: only for --trace
    from attention_atlas.model.core.errors import UserError

    file = Path(path).expanduser().resolve()
    if not file.exists():
        raise TraceFileError(f"{path} does not exist.")
    if not file.is_file():
        raise TraceFileError(f"{path} is not a file.")
    try:
        load_trace(file)
    except UserError as error:  # NotATraceFile: the file's name and why, in a sentence
        raise TraceFileError(str(error)) from error
    except OSError as error:
        raise TraceFileError(f"{path} cannot be read ({error.strerror or error}).") from error
    return file


def serve(argv: list[str] | None = None) -> int:
    """Serve the app; returns when the server stops."""
    start_server(*streamlit_arguments(argv))
    return 0


def start_server(command: list[str], environment: dict[str, str]) -> None:
    """Run `streamlit` with this command line and these environment variables set. The CPU kernel is built first
    (once a machine), so that no person's first run waits for it."""
    from streamlit.web import cli as streamlit_cli  # imports the whole of Streamlit: after the arguments parsed

    from attention_atlas.model.core.attention.native import attention_rows

    attention_rows()
    os.environ.update(environment)
    streamlit_cli.main(args=command, prog_name="attention-atlas", standalone_mode=False)


def main(argv: list[str] | None = None) -> int:
    """`attention-atlas trace …` and `attention-atlas train …` run those commands (their modules imported only
    then); anything else serves the app."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        code = importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])
        return 0 if code is None else code
    return serve(argv)
