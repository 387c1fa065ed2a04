"""What every layer's tests share: no hub, a seed, torch's threads shared among the test processes, tiny random
Hugging Face models of every family. Each folder of tests is a layer of the code, and each test carries its folder's
marker; a folder's own fixtures are in its conftest."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path

import pytest
import torch

torch.backends.mha.set_fastpath_enabled(False)  # compare against the plain PyTorch reference path
# Test processes share the cores (make test runs two): each takes its part, as too many threads slow every one
torch.set_num_threads(max(1, torch.get_num_threads() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
pytest_plugins = ("tests.chromium",)  # the `browser` fixture of the browser and load tests


# the folders, each a marker (`pytest -m app`)
LAYERS = ("model", "viz", "contract", "app", "browser", "load", "gpu", "fuzz")
TRAINING_FILES = ("test_live_training.py", "test_train.py")  # a minute or more of pure computing each
# The order files are handed to the test processes (make test keeps it: --no-loadscope-reorder): the long files first,
# so that a run ends on short ones that keep both processes busy (xdist's own order, the files with the most tests
# first, ended on a browser file while the other process idled for half a minute).
FOLDER_ORDER = ("browser", "app", "model", "gpu", "fuzz", "viz", "contract")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries its folder's marker; the training tests come first, then the folders in FOLDER_ORDER."""
    for item in items:
        folder = item.path.relative_to(Path(__file__).parent).parts[0]
        if folder in LAYERS:
            item.add_marker(folder)
    items.sort(key=_running_order)  # stable: each file's tests keep their order


def _running_order(item: pytest.Item) -> tuple[bool, int]:
    folder = item.path.relative_to(Path(__file__).parent).parts[0]
    return item.path.name not in TRAINING_FILES, FOLDER_ORDER.index(folder) if folder in FOLDER_ORDER else 0


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _quick_evaluation(monkeypatch) -> None:
    """A finished training's exact match on 8 held-out examples, not 200 (2 to 4 s of greedy decoding a run), in
    this process (the Train page says how many it measured; a browser test's server measures 200): no test reads
    more, and the run slot still holds the evaluation."""
    monkeypatch.setattr("attention_atlas.model.toy.live.VALIDATION_SIZE", 8)


from attention_atlas.model.hf.loading import load_hf_runner  # noqa: E402
from tests.tiny_hf import FAMILIES, build  # noqa: E402


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny random Hugging Face model of every supported family, each in its folder: built once per test process
    (read only: a test that changes a model's files builds its own)."""
    root = tmp_path_factory.mktemp("tiny")
    return {family: build(family, root / family) for family in FAMILIES}


@pytest.fixture(scope="module")
def runners(folders) -> dict:
    """Those models loaded, by family."""
    return {family: load_hf_runner(str(folder)) for family, folder in folders.items()}
