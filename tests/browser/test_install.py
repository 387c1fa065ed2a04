"""`pip install .` gives a person the app and the library: a wheel of one top-level package, attention_atlas, whose
`attention-atlas` command starts the app from any folder and whose Python API works in a notebook's folder, with the
app's files found in the installed package, never in the folder it was started from (which may hold a person's own
model.py, ui.py or viz.py)."""

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


SHADOWS = ("model", "ui", "viz", "app_pages", "pages")  # generic names the wheel must not install


@pytest.fixture
def notebook_folder(tmp_path: Path) -> Path:
    """A person's folder holding their own model.py, ui.py and viz.py, each failing loudly if imported."""
    for name in ("model", "ui", "viz"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the person\'s own {name}.py was imported')\n")
    return tmp_path


def test_the_wheel_holds_one_package_with_every_module_and_the_apps_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        frame = archive.read("attention_atlas/app.py")
    assert "attention-atlas = attention_atlas.cli:main" in entry_points
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"attention_atlas"}
    modules = {f"attention_atlas/{f.relative_to(ROOT)}" for folder in ("model", "ui", "viz", "app_pages")
               for f in (ROOT / folder).glob("**/*.py")}
    modules |= {f"attention_atlas/{f.name}" for f in (ROOT / "attention_atlas").glob("*.py")}
    assert modules <= names, sorted(modules - names)  # a subpackage missing from pyproject's list would be absent
    assert {"attention_atlas/.streamlit/config.toml", "attention_atlas/model/core/attention/native/attention_rows.c",
            "attention_atlas/model/toy/models/reverse/model.safetensors"} <= names
    assert frame == (ROOT / "app.py").read_bytes()  # the frame itself, not a link to it


API_SCRIPT = """
import sys
import attention_atlas as aa
assert "streamlit" not in sys.modules and "torch" not in sys.modules, "import attention_atlas imported too much"
model = aa.load("toy-reverse")
trace = model.run("hello world", hooks="*")
assert trace.output_text == "dlrow olleh", trace.output_text
assert trace["decoder.1.cross_attn.hook_pattern"].shape == (4, 12, 12), trace["decoder.1.cross_attn.hook_pattern"].shape
trace.save("t.npz")
again = aa.load_trace("t.npz")
assert again.names() == trace.names()
assert "streamlit" not in sys.modules, "the API imported Streamlit"
print(aa.__file__)
"""


def test_the_api_works_from_a_folder_with_its_own_model_ui_and_viz(installed: Path, notebook_folder: Path) -> None:
    done = subprocess.run([str(installed / "python"), "-c", API_SCRIPT], cwd=notebook_folder, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(installed.parent)), done.stdout  # the installed copy, not the repository's


def test_nothing_generic_is_importable_from_the_install(installed: Path, tmp_path: Path) -> None:
    check = f"import importlib.util as u; print([n for n in {SHADOWS!r} if u.find_spec(n) is not None])"
    found = subprocess.run([str(installed / "python"), "-c", check], cwd=tmp_path, check=True, capture_output=True,
                           text=True).stdout.strip()
    assert found == "[]"
    failed = subprocess.run([str(installed / "python"), "-c", "import model"], cwd=tmp_path, capture_output=True,
                            text=True)
    assert failed.returncode != 0 and "No module named 'model'" in failed.stderr


def test_the_installed_command_starts_the_app_from_a_folder_with_its_own_model_ui_and_viz(
        installed: Path, browser, notebook_folder: Path) -> None:
    command = [str(installed / "attention-atlas"), "--headless", "--model", "toy-reverse", "--address", "127.0.0.1"]
    for server in start_server({OPEN_MODEL_VARIABLE: ""}, "streamlit-installed.log",
                               command=lambda port: [*command, "--port", str(port)], cwd=notebook_folder):
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(server.url)
        wait_idle(page)
        expect(page.get_by_role("heading", name="Attention Atlas · toy-reverse")).to_be_visible()
        expect(page.get_by_text("dlrow olleh")).to_be_visible()  # the model ran: its output
        page.get_by_test_id("stSidebarNavLink").filter(has_text="Attention").click()
        wait_idle(page)
        expect(page.locator(".js-plotly-plot").first).to_be_visible()  # a page found as package data
        page.close()
