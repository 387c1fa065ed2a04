"""The Ablate heads page without a browser: every control, on every model kind, with the numbers it shows checked
against the runner's own."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.inspect.ablation import per_position_change, scan_heads
from attention_atlas.model.registry import load_runner
from tests.app.app_session import open_app_page
from tests.plotly_specs import chart, chart_specs, plotly_array

PAGE = "app_pages/ablation.py"
DATE = "14 feb 1999"
PROMPT = "The capital of France is"


def _page(model_id: str, text: str) -> AppTest:
    return open_app_page(PAGE, model_id, text)


def _run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _ablate(at: AppTest, heads: list[tuple[str, int]], mode: str = "zero") -> AppTest:
    at.radio(key="ablation_mode").set_value(mode)
    at.multiselect(key="ablation_heads").set_value(heads)
    return _run(at)


def _metric(at: AppTest) -> float:
    return float(at.metric[0].value)


def _reference(model_id: str, text: str, heads: list[tuple[str, int]], mode: str):
    runner = load_runner(model_id, device="cpu")
    trace = runner.run(text, options=RunOptions(hooks=("*.hook_pattern",)))
    outcome = runner.ablation_outcomes(trace, [(), tuple(heads)], mode)
    ablated = runner.run(text, options=RunOptions(hooks=(), ablated=tuple(heads), ablation=mode))
    return trace, outcome, ablated


def test_the_page_waits_for_a_choice_and_explains_itself() -> None:
    at = _page("toy-date", DATE)
    assert "Choose heads to ablate" in at.info[0].value and not at.metric
    assert at.button(key="ablation_scan_button").label == "Scan every head (24)"  # 2 + 2 + 2 layers of 4 heads


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_toy_date_shows_the_change_per_output_position_and_both_outputs(mode: str) -> None:
    heads = [("encoder.1.attn", 0), ("decoder.1.cross_attn", 3)]
    at = _ablate(_page("toy-date", DATE), heads, mode)
    trace, outcome, ablated = _reference("toy-date", DATE, heads, mode)
    change = per_position_change(outcome, 0, 1)
    assert _metric(at) == pytest.approx(change.mean(), abs=5e-5)
    bars = chart(at, "How each next-token distribution changed")["data"][0]
    np.testing.assert_allclose(plotly_array(bars["y"]), change, atol=1e-6)
    assert len(bars["x"]) == len(trace.target_tokens)
    texts = [el.value for el in at.text]
    assert texts == [trace.output_text, ablated.output_text]
    assert at.caption[1].value == {"zero": "2 heads replaced by zero (they add nothing).",
                                   "mean": "2 heads, each replaced by its mean over the positions."}[mode]


def test_smollm2_shows_the_next_token_before_and_after_and_the_continuation() -> None:
    heads = [("decoder.23.attn", 4), ("decoder.0.attn", 4)]
    at = _ablate(_page("smollm2", PROMPT), heads)
    trace, outcome, ablated = _reference("smollm2", PROMPT, heads, "zero")
    assert _metric(at) == pytest.approx(per_position_change(outcome, 0, 1)[0], abs=5e-5)
    bars = chart(at, "Next token")["data"]
    before = dict(zip(bars[0]["y"], bars[0]["x"], strict=True))
    assert max(v for v in before.values() if v is not None) == pytest.approx(trace.outputs["top_next_probs"][0],
                                                                            abs=1e-5)
    after = [v for v in bars[1]["x"] if v is not None]
    assert max(after) == pytest.approx(ablated.outputs["top_next_probs"][0], abs=1e-5)
    assert [el.value.strip() for el in at.text] == [trace.output_text.strip(), ablated.output_text.strip()]


def test_every_head_at_once_is_a_defined_result() -> None:
    at = _page("smollm2", PROMPT)
    at.toggle(key="ablation_every").set_value(True)
    _run(at)
    assert at.multiselect(key="ablation_heads").disabled
    assert "270 heads replaced" in at.caption[1].value and "every head" in at.caption[1].value
    assert np.isfinite(_metric(at)) and _metric(at) > 0.1


def test_minilm_shows_each_tokens_cosine_before_and_after() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    heads = [("encoder.5.attn", 11)]
    at = _ablate(_page("minilm", text), heads)
    trace, outcome, _ = _reference("minilm", text, heads, "zero")
    bars = chart(at, "each token's last-layer vector")["data"][0]
    np.testing.assert_allclose(plotly_array(bars["y"]), 1 - per_position_change(outcome, 0, 1), atol=1e-6)
    assert len(bars["x"]) == len(trace.tokens) and not at.text  # an encoder writes nothing


def test_the_scan_ranks_every_head_and_offers_the_top_ones() -> None:
    at = _page("toy-date", DATE)
    at.button(key="ablation_scan_button").click()
    _run(at)
    runner = load_runner("toy-date", device="cpu")
    trace = runner.run(DATE, options=RunOptions(hooks=()))
    scan = scan_heads(runner, trace, "zero")
    for site, effects in scan.effects.items():
        label = {"encoder.attn": "encoder self-attention", "decoder.attn": "decoder self-attention",
                 "decoder.cross_attn": "cross-attention"}[site]
        np.testing.assert_allclose(plotly_array(chart(at, label)["data"][0]["z"]), effects, atol=1e-6)
    table = at.dataframe[0].value
    assert len(table) == 10 and table.iloc[0, 1] == pytest.approx(scan.ranked()[0][1], abs=1e-6)
    at.button(key="ablation_pick_top").click()
    _run(at)
    assert at.multiselect(key="ablation_heads").value == [head for head, _ in scan.ranked()[:3]]
    assert at.metric  # the change of those three is shown at once
    at.radio(key="ablation_mode").set_value("mean")
    _run(at)
    titles = [spec["layout"]["title"]["text"] for spec in chart_specs(at)]
    assert not any("cross-attention" in title for title in titles)  # the zero scan is not shown as the mean one


def test_a_text_too_long_to_scan_says_so() -> None:
    at = _page("smollm2", " ".join(["word"] * 200))
    assert "Shorten the text to scan" in at.info[-1].value
    assert "ablation_scan_button" not in [button.key for button in at.button]


def test_chosen_heads_the_next_model_lacks_are_let_go() -> None:
    at = _ablate(_page("smollm2", PROMPT), [("decoder.29.attn", 8)])
    at.sidebar.selectbox(key="model_id").set_value("toy-date")
    at.sidebar.text_input(key="text").set_value(DATE)
    _run(at)
    assert at.multiselect(key="ablation_heads").value == []
    assert len(at.multiselect(key="ablation_heads").options) == 24  # the toy model's own heads
