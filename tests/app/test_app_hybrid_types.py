"""Every hybrid type of tests/tiny_hybrids.py in the app (AppTest): each page opens on its softmax attention layers
without an exception or an error, every layer picker names the true layers (ATTENTION_BLOCKS), a generated step is
transformers' own greedy token, an ablated head is that head's share of its output projection zeroed by hand,
attribution splits the logit with the other blocks as parts and patching runs, its grids the model layer's. The tiny
Qwen3.5's every view is opened by test_app_hybrids.py; here the other types open every tab of every tabbed page (the
residual stream and the logit lens read at every block), and Step through's steps are checked as far as the block
offers hooks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.patching import KINDS, patch
from attention_atlas.ui.page import PAGES
from attention_atlas.ui.patching_views import KIND_LABELS
from tests.app.app_session import LEAST_VIEWS, TABBED, assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array
from tests.tiny_hf import log_probs_with_columns_zeroed
from tests.tiny_hybrids import ATTENTION_BLOCKS, HYBRID_TYPES, build_hybrid

TEXT = "the cat sat on the mat"
ATTRIBUTION = "app_pages/attribution.py"  # its own tests
SHOWN = [page.path for page in PAGES if page.path != ATTRIBUTION]
STEPS = ["1 · X and the weights", "2 · Q, K, V", "3 · Scores → pattern", "4 · × V, W_O, residual, norm"]
SCALED = ("granitemoehybrid", "falcon_h1")  # blocks that add attention's output scaled (Granite) or beside Mamba's
# (Falcon-H1): discovery places no hook_attn_out and no per-layer hook_resid_post in them
BLOCKS = {t: int(settings.get("num_hidden_layers", 4)) for t, settings in HYBRID_TYPES.items()}  # blocks of each


def cases(pages: list[tuple[str, str | None]], types: list[str]) -> list:
    """(model type, page, view) for each type and page."""
    return [pytest.param(t, page, view, id=f"{t}-{Path(page).stem}{'-' + view if view else ''}")
            for page, view in pages for t in types]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """model type -> its folder, each built once for the module (on first use)."""
    return {}


@pytest.fixture
def folder(folders, tmp_path_factory, model_type: str) -> Path:
    if model_type not in folders:
        try:
            folders[model_type] = build_hybrid(model_type, tmp_path_factory.mktemp("hybrid-types") / model_type)
        except ImportError as error:  # a type whose model needs a package not installed here
            pytest.skip(f"{model_type} needs a package not installed: {error}")
    return folders[model_type]


def every_block_attends(model_type: str) -> bool:
    """Falcon-H1: attention in every block, so the app's layers are its blocks, named by plain numbers."""
    blocks = ATTENTION_BLOCKS[model_type]
    return blocks == tuple(range(len(blocks)))


def layer_words(model_type: str) -> list[str]:
    """How the pages name each attention layer: by its true layer (ATTENTION_BLOCKS)."""
    every = every_block_attends(model_type)
    return [f"layer {b}" if every else f"layer {b} (attention layer {i})"
            for i, b in enumerate(ATTENTION_BLOCKS[model_type])]


def layer_options(model_type: str) -> list[str]:
    """A layer picker's options: a hybrid's true layers in words, plain numbers where every block attends."""
    return [str(b) for b in ATTENTION_BLOCKS[model_type]] if every_block_attends(model_type) else \
        layer_words(model_type)


def eager(folder: Path) -> transformers.PreTrainedModel:
    return transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()


def test_every_page_of_the_app_is_opened() -> None:
    app_pages = Path(__file__).parents[2] / "app_pages"
    assert {*SHOWN, ATTRIBUTION} == {f"app_pages/{p.name}" for p in app_pages.glob("*.py") if p.stem != "__init__"}


@pytest.mark.parametrize(("model_type", "page", "view"), cases([(page, None) for page in SHOWN], list(HYBRID_TYPES)))
def test_every_page_opens(folder, model_type: str, page: str, view: None) -> None:  # its first view
    """The page's first view, and its layer picker (where it has one) offering the true layers."""
    at = open_app_page(page, folder=str(folder), text=TEXT)
    assert_ok(at, page)
    if page == "app_pages/overview.py":
        card = at.table[0].value["value"].to_dict()  # the card's values by their names
        blocks = ATTENTION_BLOCKS[model_type]
        assert card["decoder layers"] == str(len(blocks))
        assert f"layers {', '.join(map(str, blocks))}: softmax attention" in card["layer map"], card["layer map"]
    if any(box.key == "layer" for box in at.selectbox):
        assert at.selectbox(key="layer").options == layer_options(model_type), page


@pytest.fixture(scope="module")
def sessions() -> dict[str, AppTest]:
    """model type -> the app opened on it, reused by each tabbed page's test (opened on first use)."""
    return {}


def problems(at: AppTest) -> list[str]:
    """Each exception (redacted: its traceback is in the captured log) and each error shown."""
    return [e.message for e in at.exception] + [e.value for e in at.error]


@pytest.mark.parametrize(("model_type", "page"), [pytest.param(t, page, id=f"{t}-{Path(page).stem}")
                                                  for t in HYBRID_TYPES if t != "qwen3_5_text" for page in TABBED])
# Qwen3.5: every view in test_app_hybrids.py
def test_every_tab_opens(folder, sessions, model_type: str, page: str) -> None:
    """Every tab of the page opens without an exception or an error (each one's failures gathered, so one test
    names them all); the residual stream and the logit lens are read at every block, attention or not, and the
    norms are named by their true layers."""
    if model_type not in sessions:
        sessions[model_type] = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    at = sessions[model_type]
    at.switch_page(page).run()
    views = [tab.label for tab in at.tabs]
    assert len(views) >= LEAST_VIEWS[page], views
    failed = {}
    for view in views:
        at.session_state[TABBED[page]] = view
        at.run()
        if problems(at):
            failed[view] = problems(at)
        elif view == "Residual stream":
            assert list(chart(at, "‖residual‖ before the first block")["data"][0]["y"]) == \
                ["L0 pre", *(f"L{b} post" for b in range(BLOCKS[model_type]))]
        elif view == "Logit lens":
            assert len(chart(at, "logit lens · decoder")["data"][0]["y"]) == BLOCKS[model_type]
        elif view == "Norms":  # the attention layers' norms by their true layer numbers, and the final norm
            rows = list(chart(at, "decoder: what each norm divides by")["data"][0]["y"])
            assert rows[-1] == "ln_final" and {int(row.split(".")[0]) for row in rows[:-1]} == \
                set(ATTENTION_BLOCKS[model_type]), rows
    assert not failed, failed


@pytest.mark.parametrize("model_type", ["nemotron_h", *SCALED])
def test_step_through_checks_what_the_block_offers(folder, model_type: str) -> None:
    """Nemotron-H's attention block has no MLP: its residual sum is the block's output (hook_resid_post), checked
    like any other step. Granite 4's and Falcon-H1's blocks offer no hook of what attention adds (scaled, or beside
    Mamba's): every step up to Z is checked, and the last step says why it stops at W_O."""
    at = open_app_page("app_pages/step_through.py", folder=str(folder), text=TEXT)
    at.selectbox(key="layer").set_value(0).run()  # attention layer 0: not the last block
    assert_ok(at, "Step through")
    table = at.table[0].value
    held = dict(zip(table["step"], table["held"], strict=True))
    assert [held[step] for step in ("scores before the mask", "pattern (softmax)", "head output Z = A V")] == \
        ["yes"] * 3
    hooks = dict(zip(table["step"], table["the model's value"], strict=True))
    if model_type == "nemotron_h":
        assert held["Concat(heads) W_O + b_O"] == held["residual add"] == "yes"
        assert (hooks["Concat(heads) W_O + b_O"], hooks["residual add"]) == ("decoder.0.hook_attn_out",
                                                                             "decoder.0.hook_resid_post")
    else:
        assert list(table["step"])[-1] == "head output Z = A V"
    at.session_state["step_view"] = STEPS[-1]
    at.run()
    assert_ok(at, f"Step through · {STEPS[-1]}")
    said = [info.value for info in at.info if "Step through stops at W_O" in info.value]
    assert len(said) == (model_type != "nemotron_h"), said
    if model_type == "nemotron_h":  # the sum drawn is transformers' hidden state after the layer's block
        tokens = transformers.AutoTokenizer.from_pretrained(folder)(TEXT, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            hidden = eager(folder)(input_ids=tokens, output_hidden_states=True, use_cache=False).hidden_states
        drawn = plotly_array(chart(at, "the residual sum")["data"][0]["z"])
        np.testing.assert_allclose(drawn, hidden[ATTENTION_BLOCKS[model_type][0] + 1][0].numpy(), atol=1e-5)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_a_generated_step_is_the_models_greedy_token(folder, model_type: str) -> None:
    """One Step: transformers' likeliest next token with its probability, and the chosen query's attention per layer
    named by the true layers."""
    at = open_app_page("app_pages/generate.py", folder=str(folder), text=TEXT)
    at.button(key="generate_step").click().run()
    assert_ok(at, "a generated step")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        probs = eager(folder)(input_ids=tokenizer(TEXT, return_tensors="pt")["input_ids"],
                              use_cache=False).logits[0, -1].softmax(-1)  # (vocab,)
    table = at.dataframe[0].value  # the generated tokens, one a row
    assert len(table) == 1
    assert table["token"].iloc[0].strip() == tokenizer.decode([int(probs.argmax())]).strip()
    assert table["probability"].iloc[0] == pytest.approx(float(probs.max()), abs=1e-5)
    layers = chart(at, "mean over heads")
    assert list(layers["data"][0]["y"]) == layer_words(model_type)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_ablating_a_head_zeroes_its_share_of_the_output_projection(folder, model_type: str) -> None:
    """Head 0 of the second attention layer, picked by its true layer's name: the next token's probabilities after
    are the model's with that head's columns of the output projection's input zeroed, in its true block."""
    at = open_app_page("app_pages/ablation.py", folder=str(folder), text=TEXT)
    picker = at.multiselect(key="ablation_heads")
    assert f"{layer_words(model_type)[1]} · head 0" in picker.options, picker.options
    picker.set_value([("decoder.1.attn", 0)]).run()
    assert_ok(at, "an ablated head")
    model = eager(folder)
    block = model.base_model.layers[ATTENTION_BLOCKS[model_type][1]]
    projections = dict(block.named_modules())
    projection = next(projections[n] for end in ("o_proj", "out_proj") for n in projections if n.endswith(end))
    ids = transformers.AutoTokenizer.from_pretrained(folder)(TEXT)["input_ids"]
    config = model.config  # a head's width at the projection's input: its value's (latent attention: v_head_dim)
    width = getattr(config, "v_head_dim", None) or getattr(config, "head_dim", None) or \
        config.hidden_size // config.num_attention_heads
    zeroed = np.exp(log_probs_with_columns_zeroed(model, projection, ids, slice(0, width))[-1])  # (vocab,)
    after = next(bar for bar in chart(at, "before and after")["data"] if bar["name"] == "after")
    shown = plotly_array(after["x"])  # a token of "before" missing from "after": NaN
    shown = np.sort(shown[~np.isnan(shown)])[::-1]
    np.testing.assert_allclose(shown, np.sort(zeroed)[::-1][:len(shown)], atol=1e-5)


@pytest.mark.parametrize("model_type", HYBRID_TYPES)
def test_attribution_splits_a_hybrids_logit(folder, model_type: str) -> None:
    """A hybrid's other blocks are parts of the split (their shares held to transformers' hidden states in
    tests/model/test_hybrids.py): the page draws it, the parts summed the model's own logit difference."""
    at = open_app_page(ATTRIBUTION, folder=str(folder), text=TEXT)
    assert not at.exception, at.exception[0].message if at.exception else ""
    assert not at.error, [e.value for e in at.error]
    shown = {metric.label: metric.value for metric in at.metric}
    model = next(value for label, value in shown.items() if label.startswith("The model's"))
    assert shown["The parts, summed"] == model, shown
    if not every_block_attends(model_type):  # the other blocks' shares drawn, each named by its block
        bars = chart(at, "The other parts' direct share")["data"][0]
        assert any(name.startswith("block ") for name in bars["x"]), bars["x"]


@pytest.mark.parametrize("model_type", ["lfm2", "jamba", "granitemoehybrid"])
def test_patching_is_offered_beside_the_direct_split(folder, model_type: str) -> None:
    """The page splits a hybrid's logit directly (and says the contribution graph does not apply), and patches:
    its grids are the model layer's `patch` (which reads every path, Mamba's and convolutions' too); where the blocks
    offer no hook of a patched kind (Granite 4's scaled sums), patching says which, and patches the kinds it has."""
    clean, corrupted = "the quick brown fox", "the quick brown dog"
    at = open_app_page(ATTRIBUTION, folder=str(folder), text=clean)
    at.text_input(key="attribution_answer").set_value(" fox")
    at.text_input(key="attribution_wrong").set_value(" dog")
    at.text_input(key="attribution_corrupted").set_value(corrupted)
    at.run()
    assert not at.error, [e.value for e in at.error]
    assert any("the contribution graph cannot split the stream" in info.value.replace("\\", "") for info in at.info)
    kinds = ("resid_pre", "head_out") if model_type == "granitemoehybrid" else KINDS  # tests/model/test_hybrids.py:
    # Granite 4's blocks hold no hook_attn_out, no hook_mlp_out
    assert at.multiselect(key="attribution_patch_kinds").options == [KIND_LABELS[kind] for kind in kinds]
    lacking = [caption.value for caption in at.caption if caption.value.startswith("Not offered")]
    assert lacking == ([] if kinds == KINDS else [
        "Not offered: each attention output and each MLP output. This model's attention layers have no hook holding "
        "it (a block that adds attention's output scaled or beside another mixer's, or has no MLP)."]), lacking
    at.button(key="attribution_patch").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    expected = patch(load_hf_runner(str(folder)), clean, corrupted, " fox", " dog")
    assert expected.complete and expected.results["head_out"].shape == (2, 4)
    np.testing.assert_allclose(plotly_array(chart(at, "Patching the residual stream")["data"][0]["z"]),
                               expected.normalised("resid_pre"), atol=1e-6)
    np.testing.assert_allclose(plotly_array(chart(at, "Patching each head's output")["data"][0]["z"]),
                               expected.normalised("head_out"), atol=1e-6)
    said = f"clean {expected.clean:+.3f}, corrupted {expected.corrupted:+.3f}"
    assert any(said in caption.value for caption in at.caption)
