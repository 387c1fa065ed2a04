"""The Attention page's choice above its tabs (site, layer, head, the positions drawn, display options) and the
chosen layer's attention as its views draw it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import pandas as pd

from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.ui.downloads import file_name, matrix_table
from attention_atlas.ui.pickers import site_label
from attention_atlas.viz.heatmap import attention_heatmap


@dataclass(frozen=True)
class Choice:
    """What the person chose above the tabs, and the chosen layer's attention as drawn."""

    trace: Trace
    site: str
    layer: int
    head: int
    rows: np.ndarray  # (q_shown,) query positions drawn
    cols: np.ndarray  # (k_shown,) key positions drawn
    hide_special: bool
    colorscale: str
    show_values: bool

    def shown(self, matrix: np.ndarray) -> np.ndarray:
        """(..., q_len, k_len) -> (..., q_shown, k_shown) float32 (a copy only where something is left out)."""
        if len(self.rows) < matrix.shape[-2]:
            matrix = matrix[..., self.rows, :]
        return self._columns(matrix)

    def _columns(self, matrix: np.ndarray) -> np.ndarray:
        """(..., q_shown, k_len) -> (..., q_shown, k_shown) float32."""
        if len(self.cols) < matrix.shape[-1]:
            matrix = matrix[..., self.cols]
        return matrix.astype(np.float32, copy=False)

    @property
    def _query_rows(self) -> np.ndarray | slice:
        """The rows drawn, as the trace is asked for them (every row: a slice, which copies nothing)."""
        return slice(None) if len(self.rows) == len(self.trace.query_ids(self.site)) else self.rows

    @cached_property
    def pattern(self) -> np.ndarray:
        """(heads, q_shown, k_shown): the chosen layer as drawn, only the rows drawn computed."""
        return self._columns(self.trace.pattern_rows(self.site, self.layer, self._query_rows))

    @property
    def head_pattern(self) -> np.ndarray:
        """(q_shown, k_shown): the chosen head as drawn, only its rows drawn computed."""
        return self._columns(self.trace.head_pattern(self.site, self.layer, self.head, self._query_rows))

    @property
    def masked(self) -> np.ndarray:
        """(q_shown, k_shown) bool: True where this run's mask hid the key from the query."""
        return ~self.trace.masks[self.site][np.ix_(self.rows, self.cols)]

    @property
    def queries(self) -> list[str]:
        return [self.trace.query_tokens(self.site)[i] for i in self.rows]

    @property
    def keys(self) -> list[str]:
        return [self.trace.key_tokens(self.site)[i] for i in self.cols]

    @property
    def name(self) -> str:
        """A file name stem: model, site, layer."""
        return file_name(self.trace.facts.model_id, self.site, self.layer)

    @property
    def label(self) -> str:
        return site_label(self.trace, self.site)

    @property
    def where(self) -> str:
        return f"{self.label} · layer {self.layer}"

    def heatmap(self, matrix: np.ndarray, title: str, masked: np.ndarray):
        """A (q_shown, k_shown) matrix with the chosen options, `masked` cells hatched. Hidden special tokens
        take weight with them, so the colours then stretch over what is shown."""
        top = (float(np.nanmax(matrix)) or 1.0) if self.hide_special else 1.0
        return attention_heatmap(matrix, self.queries, self.keys, title, row_positions=self.rows,
                                 col_positions=self.cols, colorscale=self.colorscale, show_values=self.show_values,
                                 zrange=(0.0, top), masked=masked)

    def table(self, matrix: np.ndarray) -> Callable[[], pd.DataFrame]:
        """The CSV of a (q_shown, k_shown) matrix with position-qualified headers, made when asked. It holds the
        matrix and labels, not the trace: a session keeps its download callables after the run."""
        return partial(matrix_table, matrix, self.queries, self.keys, self.rows, self.cols)

    @property
    def rows_note(self) -> str:
        """What a row of the drawn matrix sums to."""
        if self.hide_special:
            return ("Each row sums to 1 over all keys; with special tokens hidden, the rows drawn sum to less and "
                    "the colours stretch up to the largest weight shown.")
        return "Each row sums to 1."
