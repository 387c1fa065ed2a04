"""Fixtures of the model layer's tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(params=["native", "torch"])
def reduction(request, monkeypatch) -> str:
    """Each way a block of attention rows is reduced on the CPU: the native kernel (which CI must have: a test of
    it that silently fell back to torch would compare torch with itself) and torch ops."""
    from attention_atlas.model.core.attention import native

    if request.param == "torch":
        monkeypatch.setattr(native, "attention_rows", lambda: None)
    elif native.attention_rows() is None:
        assert not os.environ.get("CI"), "the native kernel did not compile in CI"
        pytest.skip("no C compiler here: the native kernel is not built (the torch ops are tested)")
    return request.param


@pytest.fixture(scope="session")
def mla_folders(tmp_path_factory) -> dict:
    """The tiny DeepSeek-V2 and V3 (multi-head latent attention: tests/tiny_hf.py MLA_TYPES), each in a folder."""
    from tests.tiny_hf import MLA_TYPES, build_type

    root = tmp_path_factory.mktemp("mla")
    return {model_type: build_type(model_type, root / model_type) for model_type in MLA_TYPES}


@pytest.fixture(scope="session")
def mla_runners(mla_folders) -> dict:
    """The tiny DeepSeek-V2 and V3 loaded through the app's Hugging Face path (and its guard)."""
    from attention_atlas.model.hf.loading import load_hf_runner

    return {model_type: load_hf_runner(str(folder)) for model_type, folder in mla_folders.items()}
