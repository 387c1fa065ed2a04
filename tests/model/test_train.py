"""Training runs end to end (a few steps) and what it saves loads back as the same model."""

from pathlib import Path

import torch

from model.toy.store import load_toy, save_toy
from model.toy.tasks import TASKS, make_examples
from model.toy.train import TrainSettings, batch_loss, learning_rate, main, train


def test_learning_rate_warms_up_then_decays() -> None:
    s = TrainSettings(peak_lr=1e-3, warmup=100)
    assert learning_rate(50, s) == 5e-4
    assert learning_rate(100, s) == 1e-3
    assert learning_rate(400, s) == 5e-4


def test_a_few_steps_lower_the_loss_and_save_round_trip(tmp_path: Path) -> None:
    settings = TrainSettings(steps=30, eval_every=15, validation_size=4, batch_size=16)
    toy = train("gpt-date", settings)
    assert toy.training["steps"] == 30
    pairs = make_examples(TASKS["gpt-date"], 16, seed=5)
    fresh = train("gpt-date", TrainSettings(steps=1, eval_every=100, validation_size=1))
    with torch.no_grad():
        assert batch_loss(toy, pairs, 0.0) < batch_loss(fresh, pairs, 0.0)
    save_toy(toy, tmp_path)
    loaded = load_toy("gpt-date", root=tmp_path)
    for (name, a), b in zip(toy.model.state_dict().items(), loaded.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert loaded.training == toy.training


def test_command_line_writes_the_model(tmp_path: Path, capsys) -> None:
    main(["--task", "copy", "--out", str(tmp_path), "--steps", "2"])
    assert (tmp_path / "copy" / "model.safetensors").is_file()
    assert "saved" in capsys.readouterr().out
