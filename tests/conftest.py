import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

torch.backends.mha.set_fastpath_enabled(False)  # compare against the plain PyTorch reference path


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def toy_runs(monkeypatch) -> list[str]:
    """The texts every toy model is run on during the test, in order (to check when the model runs again)."""
    from model.toy.runner import ToyRunner

    calls: list[str] = []
    real_run = ToyRunner.run

    def counting_run(self, text, *args, **kwargs):
        calls.append(text)
        return real_run(self, text, *args, **kwargs)

    monkeypatch.setattr(ToyRunner, "run", counting_run)
    return calls

from tests.browser import app_url, browser, page  # noqa: E402, F401 (the browser tests' fixtures)
