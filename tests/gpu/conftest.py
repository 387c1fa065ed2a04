"""The GPU layer: the app's runs on a CUDA GPU held to the same runs on the CPU. Where torch sees no CUDA device (CI,
most laptops) every test here is skipped, with the reason. `make test-gpu` runs them; scripts/gpu_check.sh runs them
and then bench.gpu_capture as one command (docs/performance.md, "On a GPU")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gpu.models import Loaded
from tests.tiny_hf import FAMILIES, TYPES, build, build_type

HERE = Path(__file__).parent
NO_CUDA = ("no CUDA GPU here (torch.cuda.is_available() is False): the GPU tests run on a machine with one "
           "(make test-gpu)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this folder is skipped, saying why, without a CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_CUDA)
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _full_float32_products():
    """Float32 matrix products in full precision, as the app leaves them (torch's default: the app sets nothing): the
    float32 tolerances (compare.py) assume it. An environment that turned TF32 on would fail them for that alone."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(scope="session")
def tiny_folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny random Hugging Face model of every family and type, each in its folder (one set a session)."""
    root = tmp_path_factory.mktemp("gpu_tiny")
    made = {family: build(family, root / family) for family in FAMILIES}
    return made | {model_type: build_type(model_type, root / model_type) for model_type in TYPES}


@pytest.fixture(scope="session")
def loaded(tiny_folders) -> Loaded:
    """Runners by (model, device, precision), each loaded once a session."""
    return Loaded(tiny_folders)
