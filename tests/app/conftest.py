"""Fixtures of the app layer's tests (Streamlit's AppTest)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest


@pytest.fixture
def toy_runs(monkeypatch) -> list[str]:
    """The texts every toy model is run on during the test, in order (to check when the model runs again)."""
    from attention_atlas.model.toy.runner import ToyRunner

    calls: list[str] = []
    real_run = ToyRunner.run

    def counting_run(self, text, *args, **kwargs):
        calls.append(text)
        return real_run(self, text, *args, **kwargs)

    monkeypatch.setattr(ToyRunner, "run", counting_run)
    return calls


@pytest.fixture(autouse=True, scope="session")
def _component_manifests_scanned_once() -> Iterator[None]:
    """Every AppTest scans the installed packages' metadata for Streamlit components on its first run (0.1 s each:
    several hundred AppTests a suite); the packages do not change during it, so each test process scans once."""
    from streamlit.components.v2 import manifest_scanner

    scan = functools.cache(manifest_scanner.scan_component_manifests)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_scanner, "scan_component_manifests", lambda: list(scan()))
        yield
