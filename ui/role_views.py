"""Heads named by what they do (model/core/trace/head_roles.py) on the pages: the Attention page's model view gains a
grid of every head coloured by its role (a click opens the head), and the Overview opens on the clearest head by its
role. The roles are read from the site's summary (ui/site_summary.py), once per trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attention_atlas.model.core.trace.head_roles import ROLE_MEASURE, site_roles
from attention_atlas.model.core.trace.retrieval import site_retrieval
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.plot.common import site_label
from attention_atlas.ui.downloads import constant, downloads, figure_label, file_name
from attention_atlas.ui.site_summary import site_summary
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.roles import role_grid

RETRIEVAL = 0.1  # a retrieval score the caption counts heads from (Wu et al. 2024 call a head of 0.1 a retrieval head)
CLEAREST = ("induction", "previous token")  # the roles the Overview opens on, in this order, the strongest head of each


def roles_of(trace: Trace, site: str) -> pd.DataFrame:
    """The site's heads and roles (`site_roles`) and their retrieval scores (`site_retrieval`, NaN where the text
    repeats no span), computed once per trace."""
    ids = None if Site.of(site).is_cross else trace.query_ids(site)

    def table() -> pd.DataFrame:
        roles = site_roles(site, site_summary(trace, site), trace.masks[site], ids)
        return roles.assign(retrieval=site_retrieval(trace, site).reshape(-1))

    return per_trace(trace, ("head roles", site), table)


def role_measures(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(each head's share behind its role, the measure's name), each (rows,); NaN and "" for "mixed"."""
    names = table["role"].map(ROLE_MEASURE).fillna("")
    shares = np.array([row[name] if name else np.nan for name, (_, row) in zip(names, table.iterrows(), strict=True)],
                      dtype=np.float64)
    return shares, names.to_numpy(dtype=str)


def roles_section(trace: Trace, site: str, chart_key: str) -> None:
    """The site's heads coloured by role, its counts said, the table a download; a click on a head opens it."""
    table = roles_of(trace, site)
    layers, heads = int(table["layer"].max()) + 1, int(table["head"].max()) + 1
    roles = table["role"].to_numpy(dtype=str).reshape(layers, heads)
    shares, names = role_measures(table)
    counts = table["role"].value_counts()
    retrieval = table["retrieval"].to_numpy(dtype=np.float64).reshape(layers, heads)
    copying = "" if np.isnan(retrieval).all() else (
        f" On the span this text says twice, {int((retrieval >= RETRIEVAL).sum())} heads copy at least "
        f"{RETRIEVAL:.0%} of its tokens (their retrieval score, Wu et al. 2024, is on hover and in the table).")
    st.caption("Each head named by what its statistics show it does (docs/python.md, `Trace.head_roles`: the rules "
               "and thresholds): " + ", ".join(f"{n} {role}" for role, n in counts.items()) + ". Hover a head for "
               "the share behind its role; click it to open it." + copying)
    words = [trace.facts.layer_words(layer) for layer in range(layers)] if not Site.of(site).is_cross else None
    figure = role_grid(roles, shares.reshape(layers, heads), names.reshape(layers, heads),
                       f"{site_label(trace, site)}: every head by its role", words, retrieval)
    st.plotly_chart(figure, key=chart_key, on_select="rerun", selection_mode="points",
                    alt=figure_label(figure, csv=True))
    downloads(figure, file_name(trace.facts.model_id, site, "roles"), f"{chart_key}_files", constant(table))


def clearest_head(trace: Trace, site: str) -> tuple[int, int, str, float] | None:
    """(layer, head, role, its share) of the strongest head of the first role of CLEAREST any head has; None if none."""
    table = roles_of(trace, site)
    shares, _ = role_measures(table)
    for role in CLEAREST:
        chosen = np.flatnonzero(table["role"].to_numpy() == role)
        if len(chosen):
            best = chosen[int(np.argmax(shares[chosen]))]
            return int(table["layer"].iloc[best]), int(table["head"].iloc[best]), role, float(shares[best])
    return None
