"""The system Chromium for the browser and load tests: they skip loudly without it, except in CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from app_browser.page import CHROMIUM, CHROMIUM_ARGS


def require_chromium() -> None:
    """Skip (loudly) without Chromium on a developer machine; fail in CI, where it must be there."""
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} not found: install Debian's chromium package to run the browser tests"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser():
    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
