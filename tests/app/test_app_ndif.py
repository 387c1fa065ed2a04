"""Device → NDIF in the sidebar, simulated (nnsight's request round trip, model/ndif): a tiny Llama (grouped-query,
rotary) opens on the main pages and their views, its model card says where it runs, heads are ablated there, it
generates a token at a time, the Attribution page patches it there, and what NDIF does not do (the causal what-ifs,
padding, the logit lens's weights) is said in a sentence; sent to NDIF, the key comes from the environment or a
password box that is never kept in the link."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from streamlit.proto.TextInput_pb2 import TextInput as TextInputProto
from streamlit.testing.v1 import AppTest

from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.inspect.patching import attribution_patching, patch
from attention_atlas.ui import run_scheduler
from tests.app.app_session import assert_ok, open_app_page
from tests.plotly_specs import chart, plotly_array
from tests.tiny_hf import build

pytestmark = pytest.mark.slow  # a model opened on NDIF builds and probes its twin and loads nnsight: seconds
SIMULATED = "NDIF, simulated"
VIEWS = {  # page -> its tabs' key, and the views that say in a sentence what NDIF does not do (others: no error)
    "app_pages/attention.py": ("view", {"Compare"}),
    "app_pages/masks.py": ("masks_view", {"Mask on / off", "Padding"}),
    "app_pages/activations.py": ("activations_view", set()),
    "app_pages/positions.py": ("positions_view", set()),
}
WEIGHTS = {"Shapes", "This model"}  # views that read the model's weights here: they say so (docs/serving.md)
REFUSED = ("under the mask it was trained with", "no logit lens here", "not offered on NDIF")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build("llama", tmp_path_factory.mktemp("ndif") / "llama")


def on_ndif(folder: Path, device: str = SIMULATED) -> AppTest:
    at = open_app_page("app_pages/overview.py", folder=str(folder), text="the cat sat on the mat")
    assert {"NDIF", SIMULATED} <= set(at.sidebar.selectbox(key="device").options)
    at.sidebar.selectbox(key="device").set_value(device).run()
    return at


def assert_refused_in_a_sentence(at: AppTest, where: str) -> None:
    assert not at.exception, f"{where}: {at.exception[0].message}"
    assert at.error and all(any(words in e.value.replace("\\", "") for words in REFUSED) for e in at.error), where


def test_the_main_pages_open_on_a_model_on_ndif_simulated(folder) -> None:
    at = on_ndif(folder)
    assert_ok(at, "overview")
    card = at.table[0].value["value"].to_dict()  # the card's values by their names
    assert card["device"] == "NDIF (simulated)" and card["runs on"].startswith("NDIF, simulated here")
    assert at.sidebar.selectbox(key="precision").disabled
    for page, (key, refused) in VIEWS.items():
        at.switch_page(page).run()
        for view in [tab.label for tab in at.tabs]:
            at.session_state[key] = view
            at.run()
            (assert_refused_in_a_sentence if view in refused else assert_ok)(at, f"{page} · {view}")
            if view in WEIGHTS:
                assert any("stay on NDIF" in info.value for info in at.info), view
    for page in ("app_pages/step_through.py", "app_pages/tour.py", "app_pages/attribution.py"):
        at.switch_page(page).run()
        assert not at.exception, f"{page}: {at.exception[0].message if at.exception else ''}"
    at.switch_page("app_pages/step_through.py").run()
    assert any("stay on NDIF" in info.value for info in at.info), "step through"
    at.switch_page("app_pages/ablation.py").run()
    at.multiselect(key="ablation_heads").set_value([("decoder.0.attn", 1)]).run()
    assert_ok(at, "a head ablated on NDIF")
    assert at.get("plotly_chart"), "the ablated run's next tokens, drawn"
    at.switch_page("app_pages/generate.py").run()
    at.button(key="generate_run").click().run()
    assert_ok(at, "generate")
    assert at.code[0].value.startswith("the cat sat on the mat ") and len(at.dataframe[0].value) == 16  # 16 tokens


def test_the_attribution_pages_patching_runs_on_ndif(folder) -> None:
    """Patched runs and attribution patching's estimate made on NDIF (simulated), equal to the local model's."""
    at = on_ndif(folder)
    at.switch_page("app_pages/attribution.py").run()
    assert any("stay on NDIF" in info.value for info in at.info)  # the direct split, the graph, circuits
    assert any("logit difference after the text's last token is read" in caption.value for caption in at.caption)
    at.text_input(key="attribution_answer").set_value(" cat").run()
    at.text_input(key="attribution_wrong").set_value(" mat").run()
    at.text_input(key="attribution_corrupted").set_value("the mat sat on the cat").run()
    at.button(key="attribution_patch").click().run()
    assert_ok(at, "patching on NDIF")
    local = load_hf_runner(str(folder))
    texts = ("the cat sat on the mat", "the mat sat on the cat", " cat", " mat")
    for title, make in (("Patching each head's output", patch), ("estimate for each head", attribution_patching)):
        if make is attribution_patching:
            at.radio(key="attribution_patch_show").set_value("estimate").run()
        shown = plotly_array(chart(at, title)["data"][0]["z"])
        np.testing.assert_allclose(shown, make(local, *texts).normalised("head_out"), atol=1e-4)


def test_why_here_says_the_weights_stay_on_ndif(folder) -> None:
    at = on_ndif(folder)
    at.switch_page("app_pages/attention.py").run()
    at.session_state["view"] = "One head"
    at.run()
    at.toggle(key="why_open").set_value(True).run()
    assert_ok(at, "why here")
    assert any("stay on NDIF" in info.value for info in at.info)


def test_sent_to_ndif_the_key_is_asked_for_and_never_put_in_the_link(folder, monkeypatch) -> None:
    from nnsight import CONFIG

    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    monkeypatch.setattr(CONFIG.API, "APIKEY", None)
    monkeypatch.setattr(CONFIG.API, "HOST", "http://127.0.0.1:9")  # nothing listens there: no network
    at = on_ndif(folder, "NDIF")
    assert any("is a folder here" in e.value for e in at.error) and not at.exception  # a folder is never sent
    at.sidebar.text_input(key="custom_model").set_value("meta-llama/Llama-3.1-70B").run()
    assert at.sidebar.selectbox(key="device").value == "NDIF"
    assert any("NDIF needs an API key: set NDIF_API_KEY" in e.value.replace("\\", "") for e in at.error)
    box = at.sidebar.text_input(key="ndif_key")
    assert box.label == "NDIF API key" and box.proto.type == TextInputProto.PASSWORD
    box.set_value("secret-key-123").run()
    assert any("NDIF cannot be reached from this server" in e.value for e in at.error) and not at.exception
    assert "secret-key-123" not in str(dict(at.query_params))
    assert "secret-key-123" not in str(at.session_state["_kept_choices"])


def test_the_app_starts_without_importing_nnsight() -> None:
    """nnsight is imported when a model is opened on NDIF, not before: the frame's modules do not reach it."""
    code = ("import sys, attention_atlas.api, attention_atlas.ui.runs, attention_atlas.ui.trace_cache; "
            "print('nnsight' in sys.modules, 'attention_atlas.model.ndif.request' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"]


def test_ndifs_words_are_the_runs_progress_and_a_wait_nobody_watches_stops(monkeypatch) -> None:
    monkeypatch.setattr(run_scheduler, "PROGRESS_AFTER_S", 0.0)
    progress, future, drawn = run_scheduler.RunProgress(lambda: False), Future(), []

    def draw(passed: int, layers: int, words: str = "") -> None:
        drawn.append((passed, layers, words))
        future.set_result("the trace")

    progress.tell("NDIF: queued (3 s)")  # from the run's worker, as NDIF's status stream moves
    assert run_scheduler.await_run(future, progress, draw) == "the trace"
    assert drawn == [(0, 0, "NDIF: queued (3 s)")]
    with pytest.raises(run_scheduler.RunAbandoned):
        run_scheduler.RunProgress(lambda: True).tell("NDIF: queued (4 s)")


def test_a_downloaded_run_sends_its_fetches_with_the_key_its_session_typed(monkeypatch) -> None:
    """The download's maker runs outside the run's thread: the layers a run summarised on NDIF fetches for its file go
    with the key the session typed, and the thread holds no key after it."""
    import io
    import weakref

    from attention_atlas.model.ndif.status import KEY_VARIABLE, api_key
    from attention_atlas.ui.trace_files import trace_bytes

    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    sent: list[str | None] = []

    class Fetching:
        """Stands for a trace whose saving fetches a layer from NDIF (reads the key that fetch would send)."""

        def save(self, buffer: io.BytesIO) -> None:
            sent.append(api_key())
            buffer.write(b"npz")

    trace = Fetching()
    assert trace_bytes(weakref.ref(trace), "typed key") == b"npz" and sent == ["typed key"]
    assert api_key() is None
