"""What goes wrong with NDIF reaches a person as a sentence (a UserError), never a traceback: no key, NDIF or the Hub
out of reach, a model NDIF does not host, a folder given to send, the service's own refusals, a request waited for too
long, what a run on NDIF does not do. And what is sent: model/ndif/remote.py reaches nothing of this project, a
request that names this project's code is refused where NDIF would refuse it, and the sizes docs/serving.md gives for
Llama-3.1 are those of their shapes."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import attention_atlas as aa
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.ndif import remote, remote_summary
from attention_atlas.model.ndif.backends import _Listener, _strict_unpickler, read_result
from attention_atlas.model.ndif.opening import hosted_models, open_ndif
from attention_atlas.model.ndif.request import NO_KEY, _readable
from attention_atlas.model.ndif.runner import MASKS_REFUSED
from attention_atlas.model.ndif.status import following, using_key
from attention_atlas.model.ndif.transfer import config_run_bytes, config_wire_bytes
from bench.ndif_transfer import config, table

HOSTED = "meta-llama/Llama-3.1-70B"


@pytest.fixture
def no_key(monkeypatch) -> None:
    from nnsight import CONFIG

    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    monkeypatch.setattr(CONFIG.API, "APIKEY", None)


@pytest.fixture
def nowhere(monkeypatch) -> None:
    """NDIF's host a port of this machine that nothing listens on: no network reaches it."""
    from nnsight import CONFIG

    monkeypatch.setattr(CONFIG.API, "HOST", "http://127.0.0.1:9")


def test_without_a_key_a_model_on_ndif_is_refused_in_a_sentence(no_key, nowhere) -> None:
    with pytest.raises(UserError, match="NDIF needs an API key: set NDIF_API_KEY"):
        aa.load(HOSTED, backend="ndif")


def test_ndif_out_of_reach_is_said_in_a_sentence(nowhere, monkeypatch) -> None:
    monkeypatch.setenv("NDIF_API_KEY", "a-key")
    assert hosted_models() is None
    with pytest.raises(UserError, match="NDIF cannot be reached from this server to say which models it hosts"):
        aa.load(HOSTED, backend="ndif")


def test_a_model_ndif_does_not_host_is_refused_naming_those_it_does(monkeypatch) -> None:
    monkeypatch.setenv("NDIF_API_KEY", "a-key")
    with pytest.raises(UserError, match=r"NDIF does not host openai-community/gpt2-xl now\. It hosts: "
                                        r"meta-llama/Llama-3\.1-70B, meta-llama/Llama-3\.1-8B\."):
        open_ndif("openai-community/gpt2-xl", hosted=lambda: ["meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-8B"])


def test_a_folder_is_simulated_never_sent_and_ndif_chooses_the_device(folders, monkeypatch) -> None:
    monkeypatch.setenv("NDIF_API_KEY", "a-key")
    with pytest.raises(UserError, match=r"is a folder here\. Give the hub id, or simulate the run here"):
        aa.load(folders["llama"], backend="ndif")
    with pytest.raises(UserError, match="NDIF chooses where the model runs"):
        aa.load(folders["llama"], backend="ndif", simulate=True, device="cpu")
    with pytest.raises(UserError, match="not a decoder-only language model"):
        aa.load(folders["bert"], backend="ndif", simulate=True)


@pytest.mark.slow
def test_a_run_sent_without_a_key_or_a_reachable_ndif_says_so(folders, no_key, nowhere) -> None:
    runner = open_ndif(str(folders["gpt2"]), simulate=True)
    runner.hosted = type(runner.hosted)(**{**vars(runner.hosted), "simulate": False})  # as if opened to send
    with pytest.raises(UserError, match=NO_KEY.split(":")[0]):
        runner.run("the cat sat")
    with using_key("a-key"), pytest.raises(UserError, match="NDIF names a model by its Hugging Face Hub id"):
        runner.run("the cat sat")  # a folder has no hub id to look up
    runner.hosted.model.to_model_key = lambda: "nnsight.modeling.transformers.TransformersModel:{}"
    with using_key("a-key"), pytest.raises(UserError, match="NDIF cannot be reached from this server"):
        runner.run("the cat sat")
    assert runner.cautions("the cat sat")[0].startswith("This text leaves this machine")
    with pytest.raises(UserError, match="under the mask it was trained with"):
        runner.run("the cat sat", None, RunOptions(causal="off"))
    assert "blocked pairs" in MASKS_REFUSED
    with pytest.raises(UserError, match="under the mask it was trained with"):
        runner.stepper("the cat sat", RunOptions(causal="off"))


def test_the_services_refusals_become_sentences() -> None:
    from nnsight.intervention.backends.remote import RemoteError

    assert "did not accept the API key" in str(_readable(RemoteError("Failed to send request: Invalid API key")))
    refused = _readable(RemoteError("Model meta-llama/Llama-3.1-405B is not deployed"))
    assert isinstance(refused, UserError) and str(refused) == "NDIF refused the run: Model meta-llama/Llama-3.1-405B " \
        "is not deployed"
    assert "cannot be reached" in str(_readable(ConnectionRefusedError(111, "Connection refused")))
    bug = KeyError("a bug")
    assert _readable(bug) is bug  # not dressed as NDIF's


def test_ndifs_statuses_are_told_and_a_long_wait_stops_at_the_deadline() -> None:
    told: list[str] = []
    listener = _Listener(timeout_s=60)
    with following(told.append):
        listener.update(type("Response", (), {"status": "QUEUED"})())
        listener.refresh()
        listener.started -= 61  # a minute later
        with pytest.raises(UserError, match="NDIF did not finish the run within 60 s"):
            listener.refresh()
    assert told == ["NDIF: queued", "NDIF: queued (0 s)"]


def test_what_ndif_runs_imports_torch_alone() -> None:
    """model/ndif/remote.py and remote_summary.py, shipped by their source, import torch and each other alone."""
    for module in (remote, remote_summary):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {f"{node.module}.{alias.name}" if node.module == "attention_atlas.model.ndif" else node.module
                     for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
        assert imported <= {"torch", "__future__", "typing", "attention_atlas.model.ndif.remote_summary"}, module


def test_a_request_naming_this_projects_code_is_refused_as_ndif_would() -> None:
    strict = _strict_unpickler()
    blob = pickle.dumps(RunOptions())  # a class of attention_atlas, which NDIF's servers do not have
    with pytest.raises(UserError, match="NDIF's servers do not have"):
        strict(__import__("io").BytesIO(blob), {}).load()
    assert strict(__import__("io").BytesIO(pickle.dumps({"a": (1, 2.0)})), {}).load() == {"a": (1, 2.0)}


def test_a_result_is_read_as_tensors_numbers_and_containers_only() -> None:
    import io

    import torch

    def saved(value) -> bytes:
        buffer = io.BytesIO()
        torch.save(value, buffer, pickle_protocol=4)  # as NDIF's server writes a result
        return buffer.getvalue()

    back = read_result(saved({"found": [(torch.ones(2, 3), None, {"scaling": 0.5})], "generated": None}))
    assert torch.equal(back["found"][0][0], torch.ones(2, 3)) and back["found"][0][2] == {"scaling": 0.5}
    with pytest.raises(pickle.UnpicklingError, match="names attention_atlas"):
        read_result(saved({"options": RunOptions()}))


def test_the_sizes_docs_serving_gives_are_those_of_llama_31s_shapes() -> None:
    """docs/serving.md's table is bench/ndif_transfer.py's, from model/ndif/transfer.py's formulas, which
    tests/model/test_ndif_runs.py holds to what simulated runs bring back."""
    docs = (Path(__file__).parents[2] / "docs" / "serving.md").read_text()
    assert table() in docs
    seventy = config("70B")
    assert config_wire_bytes(seventy, 2048) == 3_019_898_880  # 80 layers x 2,048 x 128 x (64 + 8) x 2 bytes
    for size in (config_wire_bytes(seventy, 2048), config_run_bytes(seventy, 2048)):
        assert f"{size:,} bytes" in docs


def test_a_run_that_would_bring_back_more_than_a_run_keeps_is_refused_before_it_is_sent() -> None:
    from attention_atlas.model.ndif.runner import _check_size
    from attention_atlas.model.ndif.wire import Plan

    seventy = (64, 8, 128)  # Llama-3.1-70B's heads, key/value heads, head_dim
    every_layer = Plan([(f"model.layers.{i}.self_attn", "attention") for i in range(80)], [], {})
    with pytest.raises(UserError, match=r"bring back 5\.6 GiB of queries and keys from NDIF, more than the 1 GiB"):
        _check_size(every_layer, seventy, 2048)  # 80 x (64 + 8) x 2,048 x 128 x 4 bytes, float32 here
    _check_size(Plan(every_layer.steps[:14], [], {}), seventy, 2048)  # 14 layers: 1,008 MiB
    _check_size(Plan([(path, "summary") for path, _ in every_layer.steps], [], {}), seventy, 8192)  # summaries


def test_a_fetched_source_reads_every_field_of_a_pattern_source_from_what_it_fetched() -> None:
    """A field PatternSource gains is fetched too, not read as its class default."""
    from dataclasses import fields

    from attention_atlas.model.core.attention.source import PatternSource
    from attention_atlas.model.ndif.fetched import FetchedSource

    assert all(isinstance(getattr(FetchedSource, field.name), property) for field in fields(PatternSource))


def test_a_run_keeps_the_layers_it_fetched_last_and_fetches_one_again_once_let_go() -> None:
    import numpy as np

    from attention_atlas.model.core.attention.source import PatternSource
    from attention_atlas.model.ndif.fetched import FetchedSource, Fetcher
    from attention_atlas.model.ndif.transfer import Ledger, Transfer

    asked: list[str] = []

    def fetch(name: str) -> tuple[PatternSource, Transfer]:
        asked.append(name)
        source = PatternSource(np.ones((2, 3, 4), np.float32), np.ones((1, 3, 4), np.float32), 0.5,
                               np.tril(np.ones((3, 3), bool)))
        return source, Transfer(10, 100, True)

    ledger = Ledger(Transfer(1, 2, True))
    fetcher = Fetcher(fetch, ledger, keep=2, layer_bytes=72)
    assert fetcher.allowance == 144
    layers = {name: FetchedSource((2, 3, 3), name, fetcher) for name in "abc"}
    assert layers["a"].shape == (2, 3, 3) and layers["a"].arrays() == [] and asked == []
    for name in "abab":
        assert layers[name].pattern(dtype=np.float32).shape == (2, 3, 3)
    layers["c"].scale  # noqa: B018 (a field read fetches)
    layers["b"].key  # noqa: B018
    layers["a"].query  # noqa: B018 (let go when c came: fetched again)
    assert asked == ["a", "b", "c", "a"] and layers["c"].arrays() == []  # b and a kept
    assert ledger.total == Transfer(41, 402, True, requests=5) and ledger.total.transfer_bytes == 443
    assert not layers["a"].query.flags.writeable  # shared by every session that reads the run
