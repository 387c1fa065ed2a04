"""The hook names a loaded model offers: a Hugging Face model's taps (only what its family's layout places: a block
that adds a scaled output offers no sum of it), a from-scratch model's hook points (every name of the vocabulary)."""

from __future__ import annotations

from collections.abc import Collection

from attention_atlas.model.core.runner import Runner


def offered_hooks(runner: Runner) -> Collection[str]:
    """Every hook name `runner`'s model offers."""
    taps = getattr(runner, "taps", None)
    return taps if taps is not None else runner.toy.model.hook_points  # type: ignore[attr-defined]
