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
