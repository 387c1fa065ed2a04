import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

torch.backends.mha.set_fastpath_enabled(False)  # compare against the plain PyTorch reference path


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)

from tests.browser import app_url, browser, page  # noqa: E402, F401 (the browser tests' fixtures)
