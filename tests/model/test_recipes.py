"""Each toy task carries its recipe (model/toy/tasks.py): the model it trains, how it trains (the Train page's and the
command's defaults), and the steps its shipped model trained; `attention-atlas train --all` (`make train`) retrains
every shipped model with those."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attention_atlas.cli import main
from attention_atlas.model.scratch.tokenizer import CharTokenizer
from attention_atlas.model.toy import train as train_module
from attention_atlas.model.toy.store import load_toy_folder, toy_dir
from attention_atlas.model.toy.tasks import TASKS
from attention_atlas.model.toy.train import TRAIN_SEED, Recipe, recipe_for, shipped_recipe

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


@pytest.mark.parametrize("name", TASKS)
def test_a_tasks_recipe_is_its_own_model_and_settings(name: str) -> None:
    task, recipe = TASKS[name], recipe_for(name)
    assert recipe.task == name and recipe.settings == task.settings
    assert recipe.config.vocab_size == len(CharTokenizer(task.chars)) and recipe.config.kind == task.kind


def test_the_induction_task_trains_3000_steps_on_the_page_and_its_shipped_model_up_to_8000() -> None:
    assert recipe_for("induction").settings.steps == 3000
    assert shipped_recipe("induction").settings.steps == 8000
    assert recipe_for("induction").config.n_decoder_layers == 2  # an induction head needs two layers
    for name in set(TASKS) - {"induction"}:
        assert shipped_recipe(name) == recipe_for(name)


@pytest.mark.parametrize("name", TASKS)
def test_each_shipped_model_was_trained_with_its_tasks_shipped_recipe(name: str) -> None:
    toy, recipe = load_toy_folder(toy_dir(name)), shipped_recipe(name)
    record, settings = toy.training, recipe.settings
    assert toy.model.cfg == recipe.config
    assert record["steps"] <= settings.steps and record["batch_size"] == settings.batch_size
    assert record["seed"] == TRAIN_SEED
    recorded = {"learning_rate": settings.peak_lr, "schedule": settings.schedule,
                "label_smoothing": settings.label_smoothing}  # older records leave these out
    assert {k: record[k] for k in recorded if k in record} == {k: v for k, v in recorded.items() if k in record}


def _trained(monkeypatch, argv: list[str]) -> list[tuple[Recipe, Path | None]]:
    """What `attention-atlas train ARGV` would train, and where it would write it (nothing is trained)."""
    trained: list[tuple[Recipe, Path | None]] = []
    monkeypatch.setattr(train_module, "train_and_save", lambda recipe, out: trained.append((recipe, out)))
    monkeypatch.setattr(train_module.torch, "set_num_threads", lambda n: None)
    assert main(["train", *argv]) == 0
    return trained


def test_train_all_retrains_every_task_with_its_shipped_recipe_into_its_folder(monkeypatch) -> None:
    trained = _trained(monkeypatch, ["--all"])
    assert [recipe.task for recipe, _ in trained] == list(TASKS)
    for recipe, out in trained:
        shipped = shipped_recipe(recipe.task)
        assert out is None and recipe.config == shipped.config
        assert recipe.settings.steps == shipped.settings.steps and recipe.settings.seed == TRAIN_SEED


def test_one_task_trains_the_train_pages_recipe(monkeypatch, tmp_path: Path) -> None:
    [(recipe, out)] = _trained(monkeypatch, ["--task", "induction", "--out", str(tmp_path)])
    assert recipe.settings.steps == recipe_for("induction").settings.steps and out == tmp_path


@pytest.mark.parametrize("argv", [["--all", "--out", "x"], ["--all", "--task", "copy"], []])
def test_all_names_no_folder_and_no_task(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", *argv])
    assert exit_.value.code == 2 and "error" in capsys.readouterr().err


def test_make_train_asks_the_tasks_for_their_recipes() -> None:
    """The Makefile names no task and no step count: each task carries its own."""
    recipe = re.search(r"^train:.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.MULTILINE).group(1)
    assert "train --all" in recipe and "--task" not in recipe and "--steps" not in recipe
