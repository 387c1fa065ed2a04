"""Fixtures of the app layer's tests (Streamlit's AppTest)."""

from __future__ import annotations

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
