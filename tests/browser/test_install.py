"""`pip install .` gives a person the app: a wheel whose `attention-atlas` command starts it from any folder, with
the app's files found in the installed packages, not in the folder it was started from."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app_browser.page import wait_idle
from app_browser.server import ROOT, start_server
from attention_atlas.ui.url_state import OPEN_MODEL_VARIABLE


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """`pip wheel --no-deps .` (the setuptools of this environment: no download)."""
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(folder), str(ROOT)], check=True)
    return next(folder.glob("attention_atlas-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel, which sees this environment's packages (torch, streamlit …)
    through a .pth file, but not the repository: its bin folder."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True)
    return venv / "bin"


def test_the_wheel_holds_the_command_and_the_apps_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "attention-atlas = attention_atlas.cli:main" in entry_points
    assert {"attention_atlas/app.py", "attention_atlas/.streamlit/config.toml", "app_pages/overview.py",
            "model/core/attention/native/attention_rows.c", "model/toy/models/reverse/model.safetensors"} <= names
    with zipfile.ZipFile(wheel) as archive:  # the frame itself, not a link to it
        assert archive.read("attention_atlas/app.py") == (ROOT / "app.py").read_bytes()


def test_the_installed_command_starts_the_app_from_another_folder(installed: Path, browser, tmp_path) -> None:
    where = subprocess.run([str(installed / "python"), "-c", "import app_pages, model, ui; print(ui.__file__)"],
                           cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert where.startswith(str(installed.parent)), where  # the installed copy, not the repository's
    command = [str(installed / "attention-atlas"), "--headless", "--model", "toy-reverse", "--address", "127.0.0.1"]
    for server in start_server({OPEN_MODEL_VARIABLE: ""}, "streamlit-installed.log",
                               command=lambda port: [*command, "--port", str(port)], cwd=tmp_path):
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(server.url)
        wait_idle(page)
        expect(page.get_by_role("heading", name="Attention Atlas · toy-reverse")).to_be_visible()
        expect(page.get_by_text("dlrow olleh")).to_be_visible()  # the model ran: its output
        page.get_by_test_id("stSidebarNavLink").filter(has_text="Attention").click()
        wait_idle(page)
        expect(page.locator(".js-plotly-plot").first).to_be_visible()  # a page found as package data
        page.close()
