"""The Attention page on a tiny GPT-OSS (a learned sink a head): the head view shows where the rest of each row
went, a bar named "sink" a query row with a caption of the sink's share, and the head statistics gain the sink's
share, each equal to what transformers' eager attention leaves off the tokens; every page and view opens on it."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from streamlit.testing.v1 import AppTest

from tests.app.app_session import TABBED, open_app_page
from tests.tiny_sinks import build_gpt_oss

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_gpt_oss(tmp_path_factory.mktemp("sinks") / "gpt_oss")


@pytest.fixture(scope="module")
def eager_sums(folder) -> np.ndarray:
    """(layers, heads, tokens): transformers' eager rows' sums over the tokens (the text as the app reads it)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids = transformers.AutoTokenizer.from_pretrained(folder)(TEXT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        return torch.stack(model(input_ids=ids, output_attentions=True).attentions)[:, 0].sum(-1).numpy()


def _page(folder: Path, view: str) -> AppTest:
    at = open_app_page("app_pages/attention.py", folder=str(folder), text=TEXT)
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value(3).run()
    at.session_state["view"] = view
    at.run()
    assert not at.exception and not at.error
    return at


def test_the_head_view_shows_the_sink(folder, eager_sums) -> None:
    at = _page(folder, "One head")
    charts = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec) for c in
              at.get("plotly_chart")}
    bars = charts["decoder self-attention (masked) · layer 1 · head 3 · sink"]["data"][0]
    assert bars["name"] == "sink" and bars["type"] == "bar"
    shares = 1 - eager_sums[1, 3]  # (tokens,)
    x = bars["x"]  # plotly's binary array, or a list
    drawn = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]) if isinstance(x, dict) else np.array(x)
    np.testing.assert_allclose(drawn, shares, atol=1e-5)
    caption = next(c.value for c in at.caption if c.value.startswith("The sink took"))
    assert caption == (f"The sink took {shares.mean():.1%} of head 3's attention, on average over the query rows "
                       f"drawn (from {shares.min():.1%} to {shares.max():.1%}); the tokens got the rest.")
    assert any("learned sink" in c.value for c in at.caption)  # what a row sums to


def test_the_head_statistics_gain_the_sink_share(folder, eager_sums) -> None:
    at = _page(folder, "Head statistics")
    table = at.dataframe[0].value  # layer 1's heads
    np.testing.assert_allclose(table["to the sink"].to_numpy(), 1 - eager_sums[1].mean(-1), atol=1e-5)
    assert any(re.match(r"To the sink: the average share", c.value) for c in at.caption)


def test_every_page_and_view_opens(folder) -> None:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    for page in ("app_pages/overview.py", "app_pages/generate.py", "app_pages/ablation.py"):
        at.switch_page(page).run()
        assert not at.exception and not at.error, page
    at.switch_page("app_pages/generate.py").run()
    at.button(key="generate_step").click().run()
    assert not at.exception and not at.error, "a generated step"
    for page, key in TABBED.items():
        at.switch_page(page).run()
        for view in [tab.label for tab in at.tabs]:
            at.session_state[key] = view
            at.run()
            assert not at.exception and not at.error, f"{page} · {view}"
