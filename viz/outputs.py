"""A model's output as figures and tables: next-token choices, the model card."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attention_atlas.viz.tokens import plotly_label, plotly_text, visible_token


def percent(share: float) -> str:
    """0.9997 -> '99.97%' (not a rounded '100.0%'), 0.5 -> '50.0%'."""
    text = f"{share:.1%}"
    return f"{share:.2%}" if text == "100.0%" and share < 1 else text


def next_token_bars(tokens: Sequence[str], probabilities: np.ndarray, title: str = "") -> go.Figure:
    """The most likely next tokens as horizontal bars, most likely on top."""
    labels = [plotly_label(t) for t in tokens]
    fig = go.Figure(go.Bar(x=np.asarray(probabilities, dtype=np.float32), y=list(range(len(labels))),
                           orientation="h", text=[f"{p:.1%}" for p in probabilities], textposition="auto",
                           hovertemplate="%{x:.3f}<extra></extra>"))
    fig.update_yaxes(tickvals=list(range(len(labels))), ticktext=labels, autorange="reversed")
    fig.update_xaxes(title="probability", range=[0, 1])
    fig.update_layout(title=plotly_text(title), height=60 + 30 * len(labels),
                      margin={"l": 80, "r": 20, "t": 50, "b": 40})
    return fig


def token_table(tokens: Sequence[str], ids: Sequence[int], special: Sequence[bool]) -> pd.DataFrame:
    """One row a token: its position, how it reads, its id, and whether it is a special token (<s>, [CLS], ...)."""
    return pd.DataFrame(
        {"token": [visible_token(t) for t in tokens], "id": list(ids), "special": [bool(s) for s in special]}
    ).rename_axis("position")


def forced_table(outputs: dict[str, np.ndarray]) -> pd.DataFrame:
    """A given target, token by token (the forced_* outputs of model/core/generation/forcing.py): the probability and
    rank the model gave each target token, the token it would have chosen itself, and whether the two agree."""
    return pd.DataFrame({
        "target token": [visible_token(t) for t in outputs["forced_tokens"]],
        "probability": outputs["forced_probs"].astype(np.float64),
        "rank": outputs["forced_ranks"].astype(np.int64),
        "model's choice": [visible_token(t) for t in outputs["forced_choice_tokens"]],
        "right": outputs["forced_ranks"] == 1,
    }).rename_axis("position")


def model_card(facts: Any) -> pd.DataFrame:
    """The facts of a model as a two-column table (field, value) a person can read."""
    rows = {
        "family": facts.family,
        "kind": facts.kind,
        "encoder layers": facts.n_encoder_layers or "—",
        "decoder layers": facts.n_decoder_layers or "—",
        "heads per layer": facts.n_heads,
        "key/value heads": facts.n_kv_heads,
        "d_model": facts.d_model,
        "d_ff (FFN hidden)": facts.d_ff,
        "vocabulary": f"{facts.vocab_size:,}",
        "parameters": f"{facts.n_params:,}",
        "positions": facts.positional,
        "normalisation": facts.norm,
        "longest input (tokens)": f"{facts.max_len:,}",
        "device": facts.device,
        "precision": facts.precision,
    }
    rows |= {str(k): v for k, v in facts.notes.items() if str(k) not in rows}
    return pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=pd.Index(list(rows), name="field"))
