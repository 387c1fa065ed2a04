"""The Attention page without a browser: every control, every model kind."""

import json
from collections.abc import Callable

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

import attention_atlas.ui.downloads
from attention_atlas.model.core.attention.block_means import block_starts
from attention_atlas.model.core.trace.summaries import summarise_site
from attention_atlas.viz.heatmap import block_labels
from tests.plotly_specs import chart, plotly_array

PAGE = "app_pages/attention.py"


def _attention_page(model_id: str = "toy-date", text: str | None = None, view: str | None = "One head") -> AppTest:
    """The Attention page on `model_id`, with the `view` tab open (None: the tab it opens on)."""
    at = AppTest.from_file("../../app.py", default_timeout=60)
    at.run()
    at.sidebar.selectbox(key="model_id").set_value(model_id).run()
    if text is not None:
        at.sidebar.text_input(key="text").set_value(text).run()
    at.switch_page(PAGE).run()
    at.selectbox(key="layer").set_value(0)  # the tests below start from the first head (the app opens elsewhere)
    at.selectbox(key="head").set_value(0).run()
    assert not at.exception
    return at if view is None else _view(at, view)


def _titles(at: AppTest) -> list[str]:
    return [json.loads(el.proto.spec)["layout"]["title"]["text"] for el in at.get("plotly_chart")]


def _view(at: AppTest, label: str) -> AppTest:
    """Open a tab (only the open tab is computed)."""
    at.session_state["view"] = label
    at.run()
    assert not at.exception
    return at


VIEWS = ["Model view", "One head", "All heads of this layer", "Token lines", "Head statistics", "Rollout"]


def test_every_view_renders_for_an_encoder_decoder() -> None:
    at = _attention_page(view=None)
    assert at.radio(key="site").options == [
        "encoder self-attention", "decoder self-attention (masked)", "cross-attention (decoder → encoder)"]
    assert _titles(at) == ["encoder self-attention: layers × heads",  # only the open tab is drawn
                           "encoder self-attention: every head by its role"]
    assert [title for view in VIEWS for title in _titles(_view(at, view))] == [
        "encoder self-attention: layers × heads",
        "encoder self-attention: every head by its role",
        "encoder self-attention · layer 0 · head 0",
        "layer 0: all 4 heads",
        "encoder self-attention · layer 0 · token lines",
        "encoder self-attention: entropy (bits)",
        "rollout · encoder self-attention",
    ]
    at = _view(at, "Head statistics")
    assert _titles(at) == ["encoder self-attention: entropy (bits)"]  # every layer's heads
    at.selectbox(key="attention_stats_measure").set_value("to itself").run()
    assert _titles(at) == ["encoder self-attention: to itself"]
    assert len(json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["z"]["shape"].split(",")) == 2
    stats = at.dataframe[0].value
    assert list(stats.columns) == ["entropy (bits)", "mean distance", "to first token", "to previous token",
                                   "to itself", "to first token (from query 16)", "to previous token (from query 16)",
                                   "to token after its last occurrence", "mean distance off the first token"]
    assert len(stats) == 4
    assert [b.key for b in at.get("download_button")][-1] == "attention_stats_heatmap_csv"


def test_site_layer_and_head_choose_the_matrix() -> None:
    at = _attention_page()
    at.radio(key="site").set_value("decoder.cross_attn").run()
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(3).run()
    assert not at.exception
    assert _titles(at)[0] == "cross-attention (decoder → encoder) · layer 1 · head 3"
    assert "choose a self-attention site" in _view(at, "Rollout").info[0].value  # no rollout across stacks
    at = _view(at, "Head statistics")  # position measures mean nothing across two sequences: left out, and said
    assert list(at.dataframe[0].value.columns) == ["entropy (bits)", "to first token", "to first token (from query 16)"]
    assert any("cross-attention's queries (the output) and keys (the source) are two sequences" in caption.value
               for caption in at.caption)


def test_decoder_only_and_a_real_encoder() -> None:
    at = _attention_page("toy-gpt-date", "may 1 2000")
    assert at.radio(key="site").options == ["decoder self-attention (masked)"]
    assert _titles(_view(at, "Model view")) == ["decoder self-attention (masked): layers × heads",
                                                "decoder self-attention (masked): every head by its role"]
    at = _attention_page("minilm", "The quick brown fox")
    at.selectbox(key="layer").set_value(5).run()
    at.selectbox(key="head").set_value(11).run()
    assert not at.exception
    assert _titles(at)[0] == "encoder self-attention · layer 5 · head 11"
    assert len(_view(at, "Head statistics").dataframe[0].value) == 12


def test_changing_layer_head_site_or_page_does_not_rerun_the_model(toy_runs) -> None:
    calls = toy_runs
    at = _attention_page("toy-reverse", "counted run")
    assert calls[-1] == "counted run"
    runs = len(calls)
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(2).run()
    at.radio(key="site").set_value("decoder.attn").run()
    at.switch_page("app_pages/overview.py").run()
    at.switch_page(PAGE).run()
    assert not at.exception
    assert len(calls) == runs


def _heatmap(at: AppTest, index: int = 0) -> dict:
    """The heatmap of the index-th chart that draws a head's cells (the whole head max-pooled above a long text's
    window left out)."""
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return [spec for spec in specs if "max-pooled" not in spec["layout"]["title"]["text"]][index]["data"][0]


def test_display_options_hide_special_tokens_recolour_and_write_values() -> None:
    at = _attention_page("toy-date", "may 1 2000")
    assert _heatmap(at)["x"][-1] == "#10 &lt;/s&gt;"
    at.toggle(key="attention_hide_special").set_value(True).run()
    at.selectbox(key="attention_colorscale").set_value("Greys").run()
    at.toggle(key="attention_show_values").set_value(True).run()
    assert not at.exception
    one_head = _heatmap(at)
    assert one_head["x"] == [f"#{i} {c}" for i, c in enumerate("may 1 2000".replace(" ", "·"))]  # no </s>
    assert one_head["texttemplate"] == "%{z:.2f}"
    assert one_head["colorscale"][-1][1] == "rgb(0,0,0)"
    at.radio(key="site").set_value("decoder.attn").run()
    assert _heatmap(at)["y"][0] == "#1 2"  # the decoder's <s> (position 0) is left out too
    assert _heatmap(_view(at, "Rollout"))["y"][0] == "#1 2"  # and from the rollout


def test_token_lines_choose_heads_and_one_token() -> None:
    at = _view(_attention_page("toy-date", "may 1 2000"), "Token lines")
    lines = next(el for el in at.get("plotly_chart") if "token lines" in el.proto.spec)
    drawn_heads = {t["legendgroup"] for t in json.loads(lines.proto.spec)["data"] if "legendgroup" in t}
    assert drawn_heads == {"head 0", "head 1", "head 2", "head 3"}
    at.multiselect(key="attention_lines_heads").set_value([2]).run()
    at.selectbox(key="attention_lines_focus").set_value(3).run()
    assert not at.exception
    lines = next(el for el in at.get("plotly_chart") if "token lines" in el.proto.spec)
    assert {t["legendgroup"] for t in json.loads(lines.proto.spec)["data"] if "legendgroup" in t} == {"head 2"}
    assert at.selectbox(key="attention_lines_focus").format_func(3) == "#3 ·"


def test_each_figure_has_its_downloads() -> None:
    at = _attention_page("toy-date", "may 1 2000")
    labels = [button.label for view in VIEWS for button in _view(at, view).get("download_button")]
    assert labels.count("PNG") == labels.count("SVG") == labels.count("HTML") == 7
    assert labels.count("CSV") == 4  # the one-head matrix, the heads' roles, the rollout matrix, a statistic per head


def test_a_long_text_is_drawn_through_a_window(monkeypatch) -> None:
    monkeypatch.setattr("attention_atlas.viz.heatmap.WINDOW", 5)  # toy-copy's 12 tokens stand in for 2,048
    at = _attention_page("toy-copy", "hello world")
    assert "Drawn: query rows #7–#11 × key columns #7–#11, 5 × 5 of 12 × 12 cells" in at.caption[1].value
    assert _heatmap(at)["y"] == ["#7 o", "#8 r", "#9 l", "#10 d", "#11 &lt;/s&gt;"]  # the last rows, by default
    assert _heatmap(at)["x"] == _heatmap(at)["y"]  # and the same keys: the diagonal block
    at.slider(key="attention_window_row").set_value(2).run()
    assert _heatmap(at)["x"] == _heatmap(at)["y"] == ["#2 l", "#3 l", "#4 o", "#5 ·", "#6 w"]  # keys follow
    assert at.slider(key="attention_window_row").max == 7  # the window never runs past the end: always 5 rows
    at.toggle(key="attention_window_diagonal").set_value(False).run()
    at.slider(key="attention_window_col").set_value(7).run()
    assert not at.exception
    assert (_heatmap(at)["y"][0], _heatmap(at)["x"]) == ("#2 l", ["#7 o", "#8 r", "#9 l", "#10 d", "#11 &lt;/s&gt;"])
    at.sidebar.text_input(key="text").set_value("abc").run()  # shorter than the window: no sliders
    assert not at.exception and not at.get("slider") and len(_heatmap(at)["y"]) == 4


def test_a_window_of_masked_cells_only_says_so(monkeypatch) -> None:
    monkeypatch.setattr("attention_atlas.viz.heatmap.WINDOW", 4)
    at = _attention_page("toy-gpt-date", "may 1 2000")  # causal: keys after every query are masked
    at.toggle(key="attention_window_diagonal").set_value(False).run()
    at.slider(key="attention_window_row").set_value(0).run()
    at.slider(key="attention_window_col").set_value(8).run()
    assert "Every cell of this window is masked" in at.warning[0].value


def csv_makers(monkeypatch) -> dict[str, Callable[[], pd.DataFrame]]:
    """The table makers the pages give their CSV buttons in the runs to come, by button row key."""
    made: dict[str, Callable[[], pd.DataFrame]] = {}
    real = attention_atlas.ui.downloads.downloads

    def recording(figure, name: str, key: str, table=None) -> None:
        if table is not None:
            made[key] = table
        real(figure, name, key, table)

    monkeypatch.setattr(attention_atlas.ui.downloads, "downloads", recording)
    return made


def test_a_long_texts_rollout_is_drawn_on_blocks(monkeypatch) -> None:
    # toy-copy's tokens stand in for 2,048
    monkeypatch.setattr("attention_atlas.model.core.attention.summary.ROLLOUT_SIZE", 4)
    at = _attention_page("toy-copy", "rollout on blocks", view="Rollout")
    trace = at.session_state["trace"]
    starts = block_starts(len(trace.tokens), 4)
    assert f"tokens are cut into 4 blocks of {starts[1]} or so" in " ".join(c.value for c in at.caption)
    spec = chart(at, "rollout")
    assert spec["layout"]["title"]["text"] == "rollout · encoder self-attention · 4 × 4 blocks"
    labels = block_labels(starts)
    assert spec["data"][0]["y"] == spec["data"][0]["x"] == labels and labels[0] == f"#0–#{starts[1] - 1}"
    exact = summarise_site(trace, "encoder.attn", 8).rollout  # (4, 4), as computed here
    np.testing.assert_allclose(plotly_array(spec["data"][0]["z"]), exact, atol=1e-6)
    np.testing.assert_allclose(exact.sum(-1), 1.0, atol=1e-9)


def test_a_window_has_its_own_csv_beyond_the_whole_matrix_limit(monkeypatch) -> None:
    monkeypatch.setattr("attention_atlas.viz.heatmap.WINDOW", 5)
    monkeypatch.setattr("attention_atlas.ui.downloads.WHOLE_CSV_UP_TO", 8)  # toy-copy's 12 tokens stand in for 8,192
    tables = csv_makers(monkeypatch)
    at = _attention_page("toy-copy", "hello world")
    assert any("The CSV holds the window drawn: the whole 12 × 12 matrix" in c.value for c in at.caption)
    table = tables["attention_one_head"]()
    assert table.shape == (5, 5) and list(table.index) == ["#7 o", "#8 r", "#9 l", "#10 d", "#11 </s>"]
    np.testing.assert_allclose(table.to_numpy(), plotly_array(_heatmap(at)["z"]), atol=1e-6)
