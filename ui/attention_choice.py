"""The Attention page's choice above its tabs (site, layer, head, the positions drawn, display options): the
`HeadChoice` that draws its figures (attention_atlas/plot/attention.py, which notebooks draw through too), with the
page's file names and CSV tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

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
