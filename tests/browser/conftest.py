"""The browser tests' fixtures: one app server for them all (or a module's own), the system Chromium, and a fresh
tab per test that records console errors and dialogs. What drives the app is in `app_browser`.

A test marked `@pytest.mark.opens("masks", model="toy-gpt-date", text="may 1 2000")` gets its tab on that link, as a
person opens a shared link: one first run, where the landing page, a model chosen, a text typed and a page opened are
four (a test's Chromium and server: about 5 CPU-seconds against 13 on this 2-core machine). The tests of the controls
themselves (the model picker, the text box, the pages' links) still use them."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

import pytest

from app_browser.page import base_path_probe, wait_for_model, wait_idle
from app_browser.server import ARTIFACTS, serve_app
from tests.chromium import require_chromium

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")  # the test process (make test runs two): its server's log


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """One app server for every browser test module (each test has its own browser context, so its own session);
    starting one per module cost 6 to 10 s each."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app(log_name=f"streamlit-{WORKER}.log")


@pytest.fixture(scope="module")
def fresh_app_url() -> Iterator[str]:
    """A server of the module's own, for tests that need one no other test has used (no model loaded yet)."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app(log_name=f"streamlit-fresh-{WORKER}.log")


@pytest.fixture
def page(request, browser, app_url):
    """A fresh tab on the app (on the test's `opens` link, if it has one), recording console errors and any dialog
    (which would mean a script ran)."""
    marker = request.node.get_closest_marker("opens")
    link = {} if marker is None else marker.kwargs
    yield from _tab(browser, app_url + _link(marker), link.get("model"), link.get("text"))


@pytest.fixture
def fresh_page(browser, fresh_app_url):
    """A fresh tab on a server of the module's own."""
    yield from _tab(browser, fresh_app_url)


def _tab(browser, url: str, model_id: str | None = None, text: str | None = None):
    """A tab of a new browser context (a new Streamlit session) on `url`, recording console errors and dialogs, once its
    first run has ended (where the link names a model: once the picker shows it and the box its text,
    `wait_for_model`)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.console_errors = []
    page.dialogs = []
    page.on("console", lambda msg: msg.type == "error" and not base_path_probe(msg) and page.console_errors.append(
        f"{msg.text} ({msg.location.get('url')})"))
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    if model_id is None:
        wait_idle(page)
    else:
        wait_for_model(page, model_id, text)
    yield page
    context.close()


def _link(marker: pytest.Mark | None) -> str:
    """The path and query of a test's `opens` marker ("" without one)."""
    if marker is None:
        return ""
    return f"/{marker.args[0] if marker.args else ''}?{urllib.parse.urlencode(marker.kwargs)}"
