"""A Hugging Face model spread by accelerate (model/hf/placement.py): a tiny Llama whose CPU budget holds its
embedding and first layer, the rest offloaded to the disk, traces, generates, ablates and shows its weights as the
same model on one device does; its runs are serialised; the CLI's flags; the budgets' syntax."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from attention_atlas import load_trace
from attention_atlas.model.core.capture.record import lock_of, model_lock
from attention_atlas.model.core.generation.decoding import generate
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from attention_atlas.model.hf.placement import Placement, parse_budgets, placement_words
from attention_atlas.model.inspect.head_weights import head_weights
from attention_atlas.model.inspect.norm_output import norm_output
from attention_atlas.model.inspect.positions import position_scheme
from attention_atlas.model.inspect.readout import unembedding_for
from attention_atlas.model.registry import load_runner
from attention_atlas.trace_command import main as cli
from tests.tiny_hf import build

CPU_BUDGET = 80_000  # bytes: the embedding (22 x 32 floats) and one layer (about 37 KB) of the 4-layer tiny Llama
HOOKS = ("*.hook_pattern", "*.hook_resid_pre", "*.hook_resid_post", "*.hook_rot_q", "*.hook_rot_k", "*.hook_attn_out",
         "*.mlp.hook_post", "*.ln1.hook_normalized", "*.hook_embed")
TEXT = "the quick brown fox sat on the mat"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build("llama", tmp_path_factory.mktemp("spread") / "llama", num_hidden_layers=4)


@pytest.fixture(scope="module")
def runners(folder):
    """(the model on the CPU, the same model spread: CPU then disk)."""
    return (load_hf_runner(str(folder)),
            load_hf_runner(str(folder), placement=Placement(max_memory=(("cpu", CPU_BUDGET),))))


def _same_traces(a, b) -> None:
    assert a.output_text == b.output_text and a.tokens == b.tokens
    assert a.captured.keys() == b.captured.keys()
    for name in a.captured:
        if name.endswith("hook_pattern"):
            site, layer = name.rsplit(".", 1)[0].rsplit(".", 2)[0], int(name.split(".")[1])
            np.testing.assert_allclose(a.pattern(f"{site}", layer), b.pattern(f"{site}", layer), atol=1e-6)
        else:
            np.testing.assert_allclose(a.captured[name], b.captured[name], atol=1e-5, err_msg=name)


def test_layers_past_the_cpu_budget_go_to_the_disk_and_the_trace_is_the_same(runners) -> None:
    whole, spread = runners
    device_map = spread.model.hf_device_map
    assert device_map["model.embed_tokens"] == "cpu" and device_map["lm_head"] == "disk"
    assert {"cpu", "disk"} == set(device_map.values())
    options = RunOptions(hooks=HOOKS)
    _same_traces(whole.run(TEXT, options=options), spread.run(TEXT, options=options))
    summarised = RunOptions(summarised=True)
    a, b = whole.run(TEXT, options=summarised), spread.run(TEXT, options=summarised)
    np.testing.assert_allclose(a.summaries["decoder.attn"].thumbnails, b.summaries["decoder.attn"].thumbnails,
                               atol=1e-6)
    target = whole.run("the cat", "sat on the mat", options), spread.run("the cat", "sat on the mat", options)
    np.testing.assert_allclose(target[0].outputs["forced_probs"], target[1].outputs["forced_probs"], atol=1e-6)


def test_the_model_card_says_where_each_layer_is(runners) -> None:
    _, spread = runners
    facts = spread.facts
    assert facts.device == "cpu + disk"
    assert facts.notes["where the layers are"] == ("cpu: model.embed_tokens, model.layers.0 · disk: "
                                                   "model.layers.1–3, model.norm, model.rotary_emb, lm_head")
    assert facts.notes["memory budgets"] == "cpu 78.1 KiB"
    assert facts.n_params == runners[0].facts.n_params


def test_generation_and_ablation_read_the_offloaded_layers(runners) -> None:
    whole, spread = runners
    steps = [list(generate(r.stepper(TEXT, RunOptions()), [], 3, lambda logits, _: int(logits.argmax())))
             for r in runners]
    assert [s.token_id for s in steps[0]] == [s.token_id for s in steps[1]]
    np.testing.assert_allclose(steps[0][-1].self_rows, steps[1][-1].self_rows, atol=1e-6)
    trace = whole.run(TEXT)
    rows = [[], [("decoder.0.attn", 1)], [("decoder.3.attn", 0), ("decoder.3.attn", 2)]]
    a, b = whole.ablation_outcomes(trace, rows, "zero"), spread.ablation_outcomes(trace, rows, "zero")
    np.testing.assert_allclose(a.values, b.values, atol=1e-5)


def test_weights_of_offloaded_layers_are_read_for_the_pages(runners) -> None:
    whole, spread = runners
    a, b = (head_weights(r, "decoder.attn", 3, 1, 5, 5) for r in runners)  # layer 3: on the disk
    for name in ("w_q", "w_k", "w_v", "w_o"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.allclose(a.w_q, 0)
    normalized = np.random.default_rng(0).normal(size=(3, 32)).astype(np.float32)
    np.testing.assert_allclose(norm_output(whole, "decoder.3.ln1.hook_normalized", normalized),
                               norm_output(spread, "decoder.3.ln1.hook_normalized", normalized), atol=1e-6)
    residual = torch.from_numpy(normalized)
    with torch.inference_mode():  # the final norm and lm_head: on the disk
        a_logits, b_logits = (unembedding_for(r).readout(residual).numpy() for r in runners)
    np.testing.assert_allclose(a_logits, b_logits, atol=1e-6)
    np.testing.assert_array_equal(position_scheme(whole, "decoder", 6).rotary_profile,
                                  position_scheme(spread, "decoder", 6).rotary_profile)


def test_a_spread_model_has_one_lock_for_its_passes_and_its_offloaded_weights(runners) -> None:
    from accelerate.utils import has_offloaded_params

    whole, spread = (runner.model for runner in runners)
    offloaded = [module for module in spread.modules() if has_offloaded_params(module)]
    assert offloaded and all(lock_of(module) is model_lock(spread) for module in offloaded)
    assert all(lock_of(module) is None for module in whole.modules() if module is not whole)  # nothing to guard


def test_runs_from_several_threads_are_those_of_one_thread(runners) -> None:
    _, spread = runners
    texts = ["the cat sat", "a quick brown fox", "on the mat the cat", "fox"]
    serial = {text: spread.run(text, options=RunOptions(hooks=("*.hook_resid_post",))) for text in texts}
    results: dict[int, object] = {}

    def work(index: int) -> None:
        results[index] = spread.run(texts[index % 4], options=RunOptions(hooks=("*.hook_resid_post",)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, trace in results.items():
        _same_traces(serial[texts[index % 4]], trace)
    assert len(results) == 8


def test_the_cli_spreads_a_model_and_writes_the_same_trace(folder, tmp_path, capsys) -> None:
    files = {"whole": tmp_path / "whole.npz", "spread": tmp_path / "spread.npz"}
    common = ["--model", str(folder), "--text", TEXT, "--hooks", "*.hook_pattern", "*.hook_resid_post"]
    spread = ["--device-map", "auto", "--max-memory", f"cpu={CPU_BUDGET}", "--offload-folder", str(tmp_path / "off")]
    for name, extra in (("whole", []), ("spread", spread)):
        assert cli([*common, *extra, "--out", str(files[name])]) == 0
        assert json.loads(capsys.readouterr().out)["output_text"]
    whole, spread_trace = (load_trace(files[name]) for name in ("whole", "spread"))
    _same_traces(whole, spread_trace)
    assert spread_trace.facts.device == "cpu + disk"


@pytest.mark.parametrize(("flags", "message"), [
    (["--device-map", "auto", "--max-memory", "gpu=2GiB"], "a memory budget names a device"),
    (["--device-map", "auto", "--max-memory", "cpu=lots"], "the size must be a number"),
])
def test_the_cli_says_what_is_wrong_with_a_budget(folder, flags, message, capsys) -> None:
    assert cli(["--model", str(folder), "--text", "hi", *flags]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_takes_budgets_only_with_a_device_map(folder, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli(["--model", str(folder), "--text", "hi", "--max-memory", "cpu=2GiB"])
    assert stopped.value.code == 2
    assert "go with --device-map auto" in capsys.readouterr().err


def test_budgets_read_as_accelerate_means_them() -> None:
    assert parse_budgets("cpu=2GiB 0=20GiB") == (("cpu", 2 * 2**30), ("0", 20 * 2**30))
    assert parse_budgets(["cuda:1=500MB", "mps=1.5GB"]) == (("1", 500 * 10**6), ("mps", 1_500_000_000))
    assert parse_budgets("cpu=1024, cpu=2KiB") == (("cpu", 2048),)  # the last budget a device gets
    assert parse_budgets("") == ()
    assert Placement((("0", 5), ("cpu", 7))).load_kwargs() == {"device_map": "auto", "max_memory": {0: 5, "cpu": 7}}
    for bad in ("cpu", "disk=1GB", "cpu=1XB", "=1GB", "cpu=-1GB"):
        with pytest.raises(ValueError, match=r"memory budget names a device|size must be"):
            parse_budgets(bad)


def test_placement_in_words_joins_consecutive_layers() -> None:
    device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0, "model.layers.2": 1,
                  "model.layers.3": "cpu", "model.layers.4": "cpu", "model.norm": "disk", "lm_head": "disk"}
    assert placement_words(device_map) == ("GPU 0: model.embed_tokens, model.layers.0–1 · GPU 1: model.layers.2 · "
                                           "cpu: model.layers.3–4 · disk: model.norm, lm_head")


def test_a_toy_model_is_not_spread() -> None:
    with pytest.raises(ValueError, match="toy model: it runs on one device"):
        load_runner("toy-copy", placement=Placement())
