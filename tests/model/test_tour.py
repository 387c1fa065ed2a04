"""The Tour's words follow from the run (model/inspect/tour.py): the scores' scale read from the run's own queries,
keys and scores, d_head from the captured head outputs, and a model that adds a bias to its scores said to."""

from __future__ import annotations

import math

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.tour import tour_options, tour_steps
from attention_atlas.model.registry import load_runner
from tests.tiny_hf import build

TEXT = "the quick brown fox"


def _text(runner, text: str, step: str) -> str:
    trace = runner.run(text, None, tour_options(runner.facts))
    return next(s.text for s in tour_steps(trace) if s.key.endswith(step))


def test_the_scale_is_the_runs_own(tmp_path) -> None:
    assert "divided by √d_head = √16 (4.00)" in _text(load_runner("toy-date"), "march 3 2021", "encoder.scores")
    wide = load_hf_runner(str(build("llama", tmp_path / "llama", head_dim=16)))  # d_model 32, 4 heads: not 32 / 4
    assert wide.facts.d_model // wide.facts.n_heads == 8
    assert f"divided by √d_head = √16 ({math.sqrt(16):.2f})" in _text(wide, TEXT, "decoder.scores")
    assert "each d_head = 16 numbers" in _text(wide, TEXT, "decoder.queries")
    assert "(4 × 16 numbers)" in _text(wide, TEXT, "decoder.heads_out")


def test_a_bias_on_the_scores_is_said(tmp_path) -> None:
    """T5 adds its relative position bias to QKᵀ and scales nothing: no scale is claimed."""
    said = _text(load_hf_runner(str(build("t5", tmp_path / "t5"))), TEXT, "encoder.scores")
    assert "not QKᵀ times one number" in said and "√d_head" not in said
