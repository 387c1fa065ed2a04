"""The Attribution page without a browser: on a toy GPT, an encoder-decoder, SmolLM2 (the names sentence: " Mary" vs
" John") and MiniLM (which says why not); every number it shows held to `model/inspect/attribution.py` computed
here alone, the figures' data to the metrics, and bad answers told in a sentence (a click on a head, which opens it
on the Attention page: tests/browser/test_browser_attribution.py)."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.attribution import attribute, attribution_options
from attention_atlas.model.inspect.contributions import contribution_graph, contribution_options
from attention_atlas.model.inspect.patching import attribution_patching, patch, prepare_patching
from attention_atlas.model.registry import load_runner
from tests.app.app_session import open_app_page
from tests.plotly_specs import chart, chart_specs, plotly_array

PAGE = "app_pages/attribution.py"
NAMES = "When Mary and John went to the store, John gave a drink to"


def _run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _metrics(at: AppTest) -> list[str]:
    return [m.value for m in at.metric]


def _reference(model_id: str, text: str, answer: str, wrong: str | None, position: int = -1):
    runner = load_runner(model_id)
    return attribute(runner, runner.run(text, None, attribution_options(runner)), answer, wrong, position)


@pytest.mark.slow
def test_smollm2_names_mary_over_john_and_the_heads_add_up() -> None:
    at = open_app_page(PAGE, "smollm2", NAMES)
    assert "' Mary': the likeliest" in at.text_input(key="attribution_answer").placeholder
    at.text_input(key="attribution_answer").set_value(" Mary")
    at.text_input(key="attribution_wrong").set_value(" John")
    _run(at)
    expected = _reference("smollm2", NAMES, " Mary", " John")
    assert _metrics(at)[:2] == [f"{expected.model_logit:+.3f}", f"{expected.total:+.3f}"]
    assert expected.model_logit > 0  # the model prefers Mary, as the names task wants
    shown = plotly_array(chart(at, "Each attention head")["data"][0]["z"])  # (layers, heads)
    np.testing.assert_allclose(shown, expected.heads, atol=1e-9)
    table = at.dataframe[0].value
    top = np.unravel_index(np.abs(expected.heads).argmax(), expected.heads.shape)
    assert table["head"].iloc[0] == f"layer {top[0]} · head {top[1]}"


def test_a_toy_gpt_at_a_chosen_position_with_its_defaults() -> None:
    at = open_app_page(PAGE, "toy-gpt-date", "march 3 2021")
    runner = load_runner("toy-gpt-date")
    trace = runner.run("march 3 2021", None, attribution_options(runner))
    position = trace.tokens.index("=")  # the prediction of the answer's first digit
    at.selectbox(key="attribution_position").set_value(position)
    _run(at)
    answer = at.text_input(key="attribution_answer").placeholder.split("'")[1]  # the likeliest: the default
    wrong = at.text_input(key="attribution_wrong").placeholder.split("'")[1]
    assert answer == "2"  # 2021's first digit
    expected = attribute(runner, trace, answer, wrong, position)
    assert _metrics(at)[0] == f"{expected.model_logit:+.3f}" and expected.model_logit > 0
    bars = chart(at, "Each layer")["data"]
    assert [bar["name"] for bar in bars] == ["attention heads", "MLP"]
    np.testing.assert_allclose(plotly_array(bars[1]["y"]), expected.mlp, atol=1e-9)


def test_an_encoder_decoders_cross_attention_heads_have_their_own_grid() -> None:
    at = open_app_page(PAGE, "toy-date", "march 3 2021")
    at.text_input(key="attribution_answer").set_value("3")
    at.text_input(key="attribution_wrong").set_value(" ")  # no wrong answer: the logit alone
    _run(at)
    expected = _reference("toy-date", "march 3 2021", "3", None)
    shown = plotly_array(chart(at, "Each cross-attention head")["data"][0]["z"])
    np.testing.assert_allclose(shown, expected.cross_heads, atol=1e-9)
    assert "logit of '3'" in chart(at, "Each attention head")["layout"]["title"]["text"]


def test_an_encoder_says_why_not_and_bad_answers_get_a_sentence() -> None:
    at = open_app_page(PAGE, "minilm", "the cat sat on the mat")
    assert "is an encoder" in at.info[0].value and not at.metric
    at = open_app_page(PAGE, "toy-gpt-date", "march 3 2021")
    at.text_input(key="attribution_answer").set_value("20")
    _run(at)
    assert "must be one token" in at.error[0].value and r"it is '2' \+ '0'" in at.error[0].value  # markdown escaped
    at.text_input(key="attribution_answer").set_value("<script>alert(1)</script>")
    _run(at)
    assert "must be one token" in at.error[0].value or "characters" in at.error[0].value


def test_patching_a_corruption_the_page_offers(folders) -> None:
    """A tiny GPT-2: the offered swap of the two answers, every kind patched, the grids drawn normalised, the two runs'
    logit differences said, and attribution patching's estimate beside it with their correlation."""
    at = open_app_page(PAGE, folder=str(folders["gpt2"]), text="the fox saw the dog")
    at.text_input(key="attribution_answer").set_value(" fox")
    at.text_input(key="attribution_wrong").set_value(" dog")
    _run(at)
    swap = next(b for b in at.button if b.label == "fox and dog swapped")
    swap.click()
    _run(at)
    assert at.text_input(key="attribution_corrupted").value == "the dog saw the fox"
    at.button(key="attribution_patch").click()
    _run(at)
    expected = patch(load_hf_runner(str(folders["gpt2"])), "the fox saw the dog", "the dog saw the fox", " fox",
                     " dog")
    grid = plotly_array(chart(at, "Patching the residual stream")["data"][0]["z"])
    np.testing.assert_allclose(grid, expected.normalised("resid_pre"), atol=1e-6)
    heads = plotly_array(chart(at, "Patching each head's output")["data"][0]["z"])
    np.testing.assert_allclose(heads, expected.normalised("head_out"), atol=1e-6)
    said = f"clean {expected.clean:+.3f}, corrupted {expected.corrupted:+.3f}"
    assert any(said in caption.value for caption in at.caption)
    assert any("estimate against the patched runs" in caption.value and "heads r = " in caption.value
               for caption in at.caption)
    at.radio(key="attribution_patch_show").set_value("estimate")
    _run(at)
    estimate = attribution_patching(load_hf_runner(str(folders["gpt2"])), "the fox saw the dog",
                                    "the dog saw the fox", " fox", " dog")
    shown = plotly_array(chart(at, "Attribution patching's estimate for each head")["data"][0]["z"])
    np.testing.assert_allclose(shown, estimate.normalised("head_out"), atol=1e-6)


def test_patching_over_the_servers_limit_keeps_the_estimate_and_says_why(folders, monkeypatch) -> None:
    at = open_app_page(PAGE, folder=str(folders["gpt2"]), text="the fox saw the dog")
    at.text_input(key="attribution_answer").set_value(" fox")
    at.text_input(key="attribution_wrong").set_value(" dog")
    at.text_input(key="attribution_corrupted").set_value("the dog saw the fox")
    _run(at)
    monkeypatch.setattr("attention_atlas.ui.patching_views.MAX_PATCH_WORK", 99)
    at.button(key="attribution_patch").click()
    _run(at)
    runs = prepare_patching(load_hf_runner(str(folders["gpt2"])), "the fox saw the dog", "the dog saw the fox",
                            " fox", " dog")
    said = (f"runs the model {len(runs.cells()):,} times over {runs.tokens_per_run} tokens each ({runs.work:,} "
            "tokens); the limit here is 99. Patch fewer kinds or a shorter text. Attribution patching's estimate, "
            "below, covers every kind.")
    for _ in range(2):  # and after any other rerun
        assert [said in info.value for info in at.info] == [True] and not at.error
        assert "attribution_patch_show" not in [radio.key for radio in at.radio]  # no patched runs to choose
        chart(at, "Attribution patching's estimate for each head")
        _run(at)
    monkeypatch.undo()
    at.button(key="attribution_patch").click()
    _run(at)
    assert not at.info and at.radio(key="attribution_patch_show").value == "exact"


def test_patching_texts_of_different_lengths_says_so(folders) -> None:
    at = open_app_page(PAGE, folder=str(folders["gpt2"]), text="the fox saw the dog")
    at.text_input(key="attribution_answer").set_value(" fox")
    at.text_input(key="attribution_wrong").set_value(" dog")
    at.text_input(key="attribution_corrupted").set_value("the dog saw")
    _run(at)
    at.button(key="attribution_patch").click()
    _run(at)
    assert "as many tokens" in at.error[0].value


@pytest.mark.parametrize("model_id", ["toy-gpt-date", "toy-date"])
def test_a_toy_patched_after_the_chosen_output_token(model_id: str) -> None:
    """The day's last digit ("2021-03-0|3"): the offered number changed, both runs reading the clean run's output, and
    an encoder-decoder's cross-attention heads in a grid of their own."""
    at = open_app_page(PAGE, model_id, "march 3 2021")
    trace = load_runner(model_id).run("march 3 2021")
    sequence = len(trace.target_tokens if model_id == "toy-date" else trace.tokens)
    assert f"{sequence - 2}: 0" in at.selectbox(key="attribution_position").options
    at.selectbox(key="attribution_position").set_value(sequence - 2)  # after "2021-03-0"
    at.text_input(key="attribution_answer").set_value("3")
    at.text_input(key="attribution_wrong").set_value("4")
    _run(at)
    next(b for b in at.button if b.label == "another number").click()
    _run(at)
    assert at.text_input(key="attribution_corrupted").value == "march 4 3132"
    at.text_input(key="attribution_corrupted").set_value("march 4 2021")  # the day alone
    at.button(key="attribution_patch").click()
    _run(at)
    expected = patch(load_runner(model_id), "march 3 2021", "march 4 2021", "3", "4", position=sequence - 2)
    assert expected.output == "2021-03-03" and expected.clean > 0 > expected.corrupted
    assert any(f"clean {expected.clean:+.3f}, corrupted {expected.corrupted:+.3f}" in caption.value
               and "Both runs read the output '2021-03-03'" in caption.value for caption in at.caption)
    grid = plotly_array(chart(at, "Patching the residual stream")["data"][0]["z"])
    np.testing.assert_allclose(grid, expected.normalised("resid_pre"), atol=1e-6)
    if model_id == "toy-date":
        cross = plotly_array(chart(at, "Patching each cross-attention head")["data"][0]["z"])
        np.testing.assert_allclose(cross, expected.normalised("cross_head_out"), atol=1e-6)


def test_the_contribution_graph_is_the_models_and_follows_its_threshold(folders) -> None:
    at = open_app_page(PAGE, folder=str(folders["llama"]), text="the fox saw the dog")
    runner = load_hf_runner(str(folders["llama"]))
    trace = runner.run("the fox saw the dog", options=contribution_options())
    counts = []
    for threshold in (0.01, 0.2):
        at.slider(key="attribution_graph_threshold").set_value(threshold)
        _run(at)
        expected = contribution_graph(runner, trace, -1, threshold)
        spec = chart(at, "The routes to the prediction")
        attention = [e for e in expected.edges if e.kind == "attention"]
        assert len(spec["data"][0]["hovertext"]) == len(attention)  # a click target on each attention edge
        assert [text.split(":")[0] for text in spec["data"][0]["hovertext"]] == [f"layer {e.layer}" for e in attention]
        counts.append(len(expected.edges))
    assert counts[0] > counts[1] > 0  # a lower threshold follows more routes


def test_refusals_are_sentences_and_a_bug_is_told_as_one(tmp_path, monkeypatch) -> None:
    """A post-norm OPT (OPT-350m's layout) gets the hooks it lacks in a sentence (it raised KeyError past the page's
    catch); a text patched into itself is refused (nothing to restore); a bug names its kind, its details logged."""
    from tests.model.test_attribution_refusals import build_post_norm_opt

    at = open_app_page(PAGE, folder=str(build_post_norm_opt(tmp_path / "opt350")), text="the quick brown fox")
    assert "has no decoder" in at.error[0].value and "cannot be split into parts" in at.error[0].value
    at = open_app_page(PAGE, "toy-gpt-date", "march 3 2021")
    at.text_input(key="attribution_wrong").set_value("4")
    at.text_input(key="attribution_corrupted").set_value("march 3 2021")
    _run(at)
    at.button(key="attribution_patch").click()
    _run(at)
    assert "patching has nothing to restore" in at.error[0].value
    assert not [spec for spec in chart_specs(at) if "the share of the clean logit difference restored" in
                spec["layout"].get("title", {}).get("text", "")]  # no grid of 0 / 0
    monkeypatch.setattr("attention_atlas.model.inspect.attribution.attribute",
                        lambda *args: {}["decoder.1.hook_mlp_out"])
    at.text_input(key="attribution_answer").set_value("3")  # asked anew: not the kept attribution
    _run(at)
    said = at.error[0].value.replace("\\", "")  # Markdown's escapes
    assert "Direct logit attribution failed (KeyError); the details are in the server's log" in said
