"""A model whose readout the guard refused (model/hf/readout_proof.py: here a Granite whose 1/logits_scaling is taken
out of model/inspect/logit_scales.py's table) in the app: the model card says why, the Logit lens says it in place of
a grid, and the Activations page's other views still open."""

from __future__ import annotations

from attention_atlas.model.inspect import logit_scales
from tests.app.app_session import assert_ok, open_app_page
from tests.model.test_readout_guard import GRANITE, build_decoder

TEXT = "the cat sat on the mat"


def test_the_lens_says_why_and_the_rest_opens(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(logit_scales, "GRANITE", tuple(t for t in logit_scales.GRANITE if t != "granite"))
    folder = build_decoder("granite", tmp_path / "granite", **GRANITE)
    at = open_app_page("app_pages/overview.py", folder=str(folder), text=TEXT)
    assert_ok(at, "overview")
    card = at.table[0].value["value"]
    assert "the model's own are 0.25 × these" in card["logit readout refused"]
    at.switch_page("app_pages/activations.py").run()
    for view in ("Residual stream", "Norms", "Trajectories", "Logit lens"):
        at.session_state["activations_view"] = view
        at.run()
        assert_ok(at, view)
    said = " ".join(info.value for info in at.info)
    assert "the model's own are 0.25 × these" in said and "The other views work." in said, said
    assert not [chart for chart in at.get("plotly_chart") if "logit lens" in chart.proto.spec]
