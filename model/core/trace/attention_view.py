"""Attention patterns by hook name, whether a trace captured them whole or kept their sources."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.trace.sites import PATTERN_SUFFIX


class AttentionView(Mapping[str, np.ndarray]):
    """Attention patterns by hook name, each (heads, q_len, k_len): captured ones as they are, kept sources
    computed on access (float16)."""

    def __init__(self, captured: dict[str, np.ndarray], sources: dict[str, PatternSource]) -> None:
        self._names = [k for k in captured if k.endswith(PATTERN_SUFFIX)] + list(sources)
        self._captured, self._sources = captured, sources

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._sources:
            return self._sources[name].pattern()
        if name not in self._names:
            raise KeyError(name)
        return self._captured[name]

    def __contains__(self, name: object) -> bool:
        return name in self._names  # Mapping's default reads the value: a kept source's whole pattern

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
