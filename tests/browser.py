"""The browser tests' fixtures: one app server for them all (or a module's own), the system Chromium, and a fresh
tab per test that records console errors and dialogs (import the fixtures by name into a test module). What drives
the app is in `app_browser`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from app_browser.page import CHROMIUM, CHROMIUM_ARGS, base_path_probe, wait_idle
from app_browser.server import ARTIFACTS, serve_app


def require_chromium() -> None:
    """Skip (loudly) without Chromium on a developer machine; fail in CI, where it must be there."""
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} not found: install Debian's chromium package to run the browser tests"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """One app server for every browser test module (each test has its own browser context, so its own session);
    starting one per module cost 6 to 10 s each."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app()


@pytest.fixture(scope="module")
def fresh_app_url() -> Iterator[str]:
    """A server of the module's own, for tests that need one no other test has used (no model loaded yet)."""
    require_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    yield from serve_app(log_name="streamlit-fresh.log")


@pytest.fixture(scope="session")
def browser():
    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_url):
    """A fresh tab on the app, recording console errors and any dialog (which would mean a script ran)."""
    yield from _tab(browser, app_url)


@pytest.fixture
def fresh_page(browser, fresh_app_url):
    """A fresh tab on a server of the module's own."""
    yield from _tab(browser, fresh_app_url)


def _tab(browser, url: str):
    """A tab of a new browser context (a new Streamlit session) on `url`, recording console errors and dialogs."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.console_errors = []
    page.dialogs = []
    page.on("console", lambda msg: msg.type == "error" and not base_path_probe(msg) and page.console_errors.append(
        f"{msg.text} ({msg.location.get('url')})"))
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    wait_idle(page)
    yield page
    context.close()
