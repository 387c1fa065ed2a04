"""The Attention page's choice above its tabs (site, layer, head, the positions drawn, display options): the
`HeadChoice` that draws its figures (attention_atlas/plot/attention.py, which notebooks draw through too), with the
page's file names and CSV tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import pandas as pd

from attention_atlas.plot.attention import HeadChoice
from attention_atlas.ui.downloads import file_name, matrix_table


@dataclass(frozen=True)
class Choice(HeadChoice):
    """What the person chose above the tabs, and the chosen layer's attention as drawn."""

    @property
    def name(self) -> str:
        """A file name stem: model, site, layer."""
        return file_name(self.trace.facts.model_id, self.site, self.layer)

    def table(self, matrix: np.ndarray) -> Callable[[], pd.DataFrame]:
        """The CSV of a (q_shown, k_shown) matrix with position-qualified headers, made when asked. It holds the
        matrix and labels, not the trace: a session keeps its download callables after the run."""
        return partial(matrix_table, matrix, self.queries, self.keys, self.rows, self.cols)

    @property
    def has_sinks(self) -> bool:
        """Whether the chosen layer's heads have learned sinks (GPT-OSS): one more key each, that is no token."""
        source = self.trace.pattern_source(self.site, self.layer)
        return source is not None and source.sinks is not None

    @cached_property
    def sink_shares(self) -> np.ndarray | None:
        """(q_shown,): the share of each drawn query row the chosen head's sink took, or None without sinks (read the
        window's: every row drawn is computed)."""
        if not self.has_sinks:
            return None
        return self.trace.pattern_source(self.site, self.layer).sink_shares(heads=[self.head], rows=self.rows)[0]

    @property
    def rows_note(self) -> str:
        """What a row of the drawn matrix sums to: 1 less the sink's share where the head has a sink."""
        if not self.has_sinks:
            return super().rows_note
        hidden = " Hidden special tokens take their weight with them too." if self.hide_special else ""
        return ("This model gives each head a learned sink, one more key that is no token: each row's weights on "
                f"the tokens sum to 1 less the sink's share (the sink bars below).{hidden}")
