"""The Trace: everything one run of a model produced, as plain CPU numpy data (its file: trace/file.py).

The Hugging Face models keep their patterns as what they are computed from (`source:` keys):
O(tokens x d_head) per head instead of O(tokens²). `Trace.attention[name]` and `Trace.pattern(site, layer)` give
(heads, q_len, k_len) either way, computed when read for a kept source (a view that needs only some heads or rows
asks `Trace.pattern_source`); `Trace.save(..., dense=True)` writes such patterns whole instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from difflib import get_close_matches
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pandas as pd
import torch

from attention_atlas.model.core.attention.arrays import Array, RowScaled
from attention_atlas.model.core.attention.source import ROW_BLOCK, PatternSource
from attention_atlas.model.core.attention.summary import SiteSummary
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.core.trace import file
from attention_atlas.model.core.trace.attention_view import AttentionView
from attention_atlas.model.core.trace.facts import DecodeStep, ModelFacts, OutputKind, Outputs
from attention_atlas.model.core.trace.head_roles import site_roles
from attention_atlas.model.core.trace.retrieval import site_retrieval
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.summaries import summarise_site


def _root(array: np.ndarray) -> np.ndarray:
    """The array that owns `array`'s memory (a view's base, followed to the end)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def distinct_nbytes(arrays: Iterator[np.ndarray | RowScaled] | list[np.ndarray | RowScaled]) -> int:
    """Bytes held by these arrays (a RowScaled's: its two), memory shared by several of them (views of one array)
    counted once."""
    plain = [part for a in arrays for part in (a.arrays() if isinstance(a, RowScaled) else (a,))]
    roots = {id(_root(a)): _root(a) for a in plain}
    return sum(root.nbytes for root in roots.values())


@dataclass(frozen=True)
class Trace:
    """One forward pass, captured. Frozen: one trace is shared by every session that asks for the same run."""

    facts: ModelFacts
    tokens: list[str]
    ids: list[int]
    target_tokens: list[str]
    target_ids: list[int]
    masks: dict[str, np.ndarray]  # site -> (q_len, k_len) bool, True = may attend
    captured: dict[str, np.ndarray]  # hook name -> value, batch dim removed
    outputs: Outputs
    output_text: str
    options: RunOptions
    steps: list[DecodeStep] = field(default_factory=list)
    pattern_sources: dict[str, PatternSource] = field(default_factory=dict)  # patterns kept uncomputed
    summaries: dict[str, SiteSummary] = field(default_factory=dict)  # site -> every layer reduced in the run
    #                                       (model/core/attention/summary.py; not written to a trace file: derived)
    output_kind: OutputKind = "generated"
    cautions: tuple[str, ...] = ()  # what a person must know to read the output (e.g. outside the training range)
    fallback: str = ""  # why this run left the device the model is on (a GPU out of memory), or ""
    text: str = ""  # the text the run read, as given (the tokens are its tokenizer's reading of it)
    target: str | None = None  # the target it read (teacher forcing), as given; None: it made its own output

    def __post_init__(self) -> None:
        """Every array read-only: one trace is shared by every session, and a page that wrote into it would change
        what the others see (numpy raises ValueError on such a write)."""
        for array in self._arrays():
            if isinstance(array, np.ndarray):
                array.flags.writeable = False

    def _arrays(self) -> Iterator[Array]:
        """Every array the trace holds: hooks, kept pattern sources, outputs, masks, steps and summaries."""
        yield from self.captured.values()
        yield from cast("Iterable[np.ndarray]", self.outputs.values())  # arrays all (a TypedDict's values read object)
        yield from self.masks.values()
        yield from (array for source in self.pattern_sources.values() for array in source.arrays())
        yield from (row for step in self.steps for row in step.attention.values())
        for summary in self.summaries.values():
            yield from (summary.thumbnails, summary.statistics, summary.rollout_starts, *(summary.layer_flows or ()),
                        *(() if summary.normalisers is None else (summary.normalisers,)))

    def names(self) -> list[str]:
        """Every hook name this trace holds a value for (`trace[name]`), patterns kept as sources included."""
        return [*self.captured, *self.pattern_sources]

    def __getitem__(self, name: str) -> np.ndarray:
        """The value of one hook, by its TransformerLens-style name: `trace["decoder.1.cross_attn.hook_pattern"]` is
        (heads, query, key); a pattern kept as its source is computed when read. KeyError names the closest."""
        if name in self.captured:
            return self.captured[name]
        if name in self.pattern_sources:
            return self.pattern_sources[name].pattern()
        close = get_close_matches(name, self.names(), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise KeyError(f"this trace holds no hook {name!r}{hint} (trace.names() lists the {len(self.names())} it "
                       "holds; run with hooks= that match it to record it)")

    def __contains__(self, name: object) -> bool:
        return name in self.captured or name in self.pattern_sources

    __iter__ = None  # not a sequence: `trace.names()` lists the hooks

    def save(self, path: str | Path | IO[bytes], dense: bool = False) -> None:
        """Write this trace to an .npz file (layout in docs/hooks.md). dense: every pattern kept as its source is
        written whole, (heads, q_len, k_len) float16, readable with numpy alone; ValueError past 2 GiB of them."""
        file.write(path, {f.name: getattr(self, f.name) for f in fields(self)}, dense=dense)

    @classmethod
    def load(cls, path: str | Path | IO[bytes], name: str = "", max_bytes: int | None = None) -> Trace:
        """The trace written to `path` (or an open file) by `save` (no pickles); NotATraceFile (a ValueError) says
        why a file is not one. name: how messages call it; max_bytes: the most its arrays may take decompressed."""
        return cls(**file.read(path, name, max_bytes))

    @property
    def attention(self) -> AttentionView:
        """Attention probabilities by hook name, each (heads, q_len, k_len)."""
        return AttentionView(self.captured, self.pattern_sources)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held: captured values, kept pattern sources (their shared mask and bias once),
        summaries, outputs, masks, and the decode steps' attention (token strings and ids are left out: a few bytes a
        token)."""
        arrays = [*self.captured.values(), *self.outputs.values(), *self.masks.values()]
        arrays += [array for source in self.pattern_sources.values() for array in source.arrays()]
        arrays += [row for step in self.steps for row in step.attention.values()]
        return distinct_nbytes(arrays) + sum(summary.nbytes for summary in self.summaries.values())

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of a captured value (a kept pattern: the pattern's, (heads, q_len, k_len))."""
        return self.pattern_sources[name].shape if name in self.pattern_sources else self.captured[name].shape

    def pattern_source(self, site: str, layer: int) -> PatternSource | None:
        """What one layer's pattern at a site is computed from, where the trace kept that (else None)."""
        return self.pattern_sources.get(self.pattern_name(site, layer))

    def pattern(self, site: str, layer: int) -> np.ndarray:
        """(heads, q_len, k_len): one layer's attention at a site ("encoder.attn", "decoder.cross_attn", ...)."""
        return self.attention[self.pattern_name(site, layer)]

    def head_pattern(self, site: str, layer: int, head: int, rows: Any = slice(None)) -> np.ndarray:
        """(len(rows), k_len): one head's attention (all query rows by default), computing only that head and
        those rows where the trace kept its source."""
        return self.pattern_rows(site, layer, rows, heads=[head])[0]

    def pattern_rows(self, site: str, layer: int, rows: Any, heads: Any = slice(None)) -> np.ndarray:
        """(len(heads), len(rows), k_len): some query rows of some heads, computing only those where the trace
        kept the pattern's source (a window of a long text costs its rows, not the whole matrix)."""
        source = self.pattern_source(site, layer)
        if source is not None:
            return source.pattern(heads=heads, rows=rows)
        return self.pattern(site, layer)[heads][:, rows]

    def pattern_blocks(self, site: str, layer: int) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """One captured (not kept as a source) layer's pattern, ROW_BLOCK query rows at a time, as
        `model.core.summary.summarise` reads it: (their positions, float32 (heads, rows, k_len))."""
        pattern = self.pattern(site, layer)
        for start in range(0, pattern.shape[1], ROW_BLOCK):
            block = pattern[:, start : start + ROW_BLOCK].astype(np.float32)
            yield np.arange(start, start + block.shape[1]), torch.from_numpy(block)

    def layer_thumbnails(self, site: str, size: int, rows: np.ndarray, cols: np.ndarray) -> Iterator[np.ndarray]:
        """Every layer's `layer_thumbnail`, one layer at a time."""
        return (self.layer_thumbnail(site, layer, size, rows, cols) for layer in range(self.n_layers(site)))

    def layer_thumbnail(self, site: str, layer: int, size: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """One layer's pattern at a site restricted to query `rows` x key `cols`: shrunk to (heads, size, size)
        block means where the trace kept the pattern's source (computed a block of rows at a time), else the
        (heads, rows, cols) pattern itself; `viz.thumbnails.thumbnail_grid` draws either."""
        source = self.pattern_source(site, layer)
        return source.shrunk(size, rows, cols) if source is not None else self.pattern(site, layer)[:, rows][:, :, cols]

    def sites(self) -> list[str]:
        """Attention sites with captured patterns, in model order ("encoder.attn", "decoder.attn", ...)."""
        return [site for site in self.masks if self.pattern_name(site, 0) in self.attention]

    @staticmethod
    def pattern_name(site: str, layer: int) -> str:
        """("decoder.cross_attn", 1) -> "decoder.1.cross_attn.hook_pattern"."""
        return Site.of(site).pattern_name(layer)

    def n_layers(self, site: str) -> int:
        return self.facts.n_encoder_layers if Site.of(site).stack == "encoder" else self.facts.n_decoder_layers

    def _reads_target(self, site: str) -> bool:
        """Whether the site's queries are the decoder input of an encoder-decoder (not the source)."""
        return Site.of(site).stack == "decoder" and bool(self.target_tokens)

    def query_tokens(self, site: str) -> list[str]:
        """Row labels of the site's attention: the decoder's input for decoder sites of an encoder-decoder."""
        return self.target_tokens if self._reads_target(site) else self.tokens

    def key_tokens(self, site: str) -> list[str]:
        """Column labels: cross-attention looks at the source."""
        return self.tokens if Site.of(site).is_cross else self.query_tokens(site)

    def query_ids(self, site: str) -> list[int]:
        """Token ids of the site's rows (as `query_tokens`)."""
        return self.target_ids if self._reads_target(site) else self.ids

    def key_ids(self, site: str) -> list[int]:
        """Token ids of the site's columns (as `key_tokens`)."""
        return self.ids if Site.of(site).is_cross else self.query_ids(site)

    def is_special(self, ids: list[int]) -> np.ndarray:
        """(len,) bool: which of these ids are special tokens (<s>, </s>, [CLS], [SEP], padding, ...)."""
        return np.isin(np.asarray(ids, dtype=np.int64), self.facts.special_ids)

    def head_roles(self) -> pd.DataFrame:
        """Every head of every site named by what it does (model/core/trace/head_roles.py: ROLES and their rules): site,
        layer, head, role and the measures behind it, read from the summary the run made, else from one made now
        (`summarise_site`: one pass over every layer's kept sources, as a trace loaded from a file needs); and its
        retrieval score (model/core/trace/retrieval.py `site_retrieval`)."""
        tables = []
        for site in self.sites():
            summary = self.summaries[site] if site in self.summaries else summarise_site(self, site)
            ids = None if Site.of(site).is_cross else self.query_ids(site)
            roles = site_roles(site, summary, self.masks[site], ids)
            tables.append(roles.assign(retrieval=site_retrieval(self, site).reshape(-1)))
        return pd.concat(tables, ignore_index=True)

    def summary(self) -> dict[str, Any]:
        """A short JSON-able description: model, tokens, output, hook names with shapes."""
        return {
            "model_id": self.facts.model_id,
            "tokens": self.tokens,
            "target_tokens": self.target_tokens,
            "output_text": self.output_text,
            "output_kind": self.output_kind,
            "cautions": list(self.cautions),
            "masks": {k: list(v.shape) for k, v in self.masks.items()},
            "hooks": {k: list(self.shape(k)) for k in [*self.captured, *self.pattern_sources]},
        }
