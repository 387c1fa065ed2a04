"""The app's server for browser tests, benchmarks and screenshots: `streamlit run app.py` on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"  # server logs and screenshots


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Server:
    """A running `streamlit run app.py`: its URL, its process id (for its memory) and its log file."""

    url: str
    pid: int
    log: Path

    def rss(self) -> int:
        """The server process's resident memory now, in bytes (VmRSS of /proc/PID/status)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {self.pid}")


def serve_app(env: dict[str, str] | None = None, log_name: str = "streamlit.log",
              log_folder: Path = ARTIFACTS) -> Iterator[str]:
    """Start `streamlit run app.py` on a free port, wait until healthy, yield its URL, stop it."""
    for server in start_server(env, log_name, log_folder=log_folder):
        yield server.url


def streamlit_command(port: int) -> list[str]:
    """`streamlit run app.py` from the repository, headless, on `port`."""
    return [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
            "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]


def start_server(env: dict[str, str] | None = None, log_name: str = "streamlit.log", log_folder: Path = ARTIFACTS,
                 command: Callable[[int], list[str]] = streamlit_command, cwd: Path = ROOT) -> Iterator[Server]:
    """As `serve_app`, yielding the Server; `env`: variables to set for it beside this process's environment;
    `command`: the command line that serves the app on a port, run in `cwd`; its output goes to log_folder/log_name."""
    port = free_port()
    log_folder.mkdir(exist_ok=True)
    log_path = log_folder / log_name
    log = open(log_path, "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(command(port), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start; see {log_path}")
            time.sleep(0.3)
        yield Server(url, process.pid, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
