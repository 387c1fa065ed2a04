"""Loading a Hugging Face model and running it on bad input: clear messages for a missing or unsafe folder, an
unknown id and unusable text; a GPU out of memory retried on the CPU; ids the tokenizer has no token for."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.hf.loading import load_hf_runner
from tests.tiny_hf import build

TEXT = "the quick brown fox jumps over the lazy dog"


def test_unknown_hub_id_fails_fast_with_advice() -> None:
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"not in the local Hugging Face cache.*huggingface-cli download"):
        load_hf_runner("no-such-org/no-such-model")
    assert time.perf_counter() - start < 5


def test_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "weights.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"has no config.json"):
        load_hf_runner(str(tmp_path))


def test_pickle_checkpoint_is_refused(tmp_path: Path) -> None:
    folder = build("bert", tmp_path / "pickled", safe=False)
    assert (folder / "pytorch_model.bin").is_file()
    with pytest.raises(ValueError, match=r"no \.safetensors weights \(found pytorch_model.bin\).*Pickle"):
        load_hf_runner(str(folder))


def test_text_longer_than_the_model_allows(runners) -> None:
    with pytest.raises(ValueError, match=r"tokens long; .* accepts at most 64"):
        runners["bert"].run("the " * 70)


@pytest.mark.parametrize("text", ["", "a\x00b"])
def test_unusable_text(runners, text: str) -> None:
    with pytest.raises(ValueError, match=r"empty|control characters"):
        runners["gpt2"].run(text)


def test_out_of_memory_on_a_gpu_retries_on_the_cpu(folders, monkeypatch) -> None:
    runner = load_hf_runner(str(folders["gpt2"]))
    runner.facts = dataclasses.replace(runner.facts, device="cuda:0")  # as if loaded on a GPU
    real_run = runner._run

    def run_out_of_memory(model, *args):
        if model is runner.model:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_run(model, *args)

    monkeypatch.setattr(runner, "_run", run_out_of_memory)
    trace = runner.run(TEXT)
    assert trace.facts.device == "cpu"
    assert trace.fallback == "The CUDA ran out of memory; this run used the CPU instead."
    assert runner._cpu_model() is not runner.model
    assert trace.attention["decoder.0.attn.hook_pattern"].shape == (4, 9, 9)


def test_other_errors_are_not_mistaken_for_out_of_memory(folders, monkeypatch) -> None:
    runner = load_hf_runner(str(folders["gpt2"]))
    runner.facts = dataclasses.replace(runner.facts, device="cuda:0")
    monkeypatch.setattr(runner, "_run", lambda *a: (_ for _ in ()).throw(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        runner.run(TEXT)


def test_a_model_whose_embedding_is_larger_than_its_tokenizer_names_the_ids_it_has_no_token_for(tmp_path) -> None:
    """Padded vocabularies (Pythia, Qwen, many fine-tunes): an id past the tokenizer, chosen by the model, reads as
    `[id N]` in the next-token bars, the output and generation, instead of crashing the run."""
    from attention_atlas.model.core.generation.decoding import generate
    from attention_atlas.model.core.generation.sampling import DecodeSettings, choose_next
    from attention_atlas.model.hf.text import unknown_id

    runner = load_hf_runner(str(build("llama", tmp_path / "padded", vocab_size=200)))
    assert runner.facts.vocab_size == 200 > len(runner.tokenizer)
    padded_id = 150
    with torch.no_grad():
        runner.model.get_output_embeddings().weight[padded_id] += 5  # the model now prefers an id with no token
    trace = runner.run("the quick brown fox")
    assert trace.outputs["top_next_tokens"][0] == unknown_id(padded_id) == "[id 150]"
    assert trace.output_text.startswith(unknown_id(padded_id))
    stepper = runner.stepper("the quick brown fox", RunOptions())
    steps = list(generate(stepper, [], 2, lambda logits, step: choose_next(logits, DecodeSettings(), step)))
    assert [step.token_id for step in steps] == [padded_id, padded_id]
    assert stepper.tokens([padded_id, 5]) == [unknown_id(padded_id), runner.tokenizer.convert_ids_to_tokens(5)]
    assert runner.text.decode([5, padded_id]) == runner.tokenizer.decode([5]) + unknown_id(padded_id)
