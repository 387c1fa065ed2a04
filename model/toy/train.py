"""Train a toy model on a CPU in minutes: `attention-atlas train --task reverse [--out DIR]`; `attention-atlas train
--all` retrains every shipped model.

Each task carries its recipe (model/toy/tasks.py; `recipe_for`): the shipped tasks train the toy size with Adam
(beta2 = 0.98, eps = 1e-9), the paper's warm-up-then-inverse-square-root learning rate and label smoothing 0.1; the
induction task trains a 2-layer pre-norm decoder at a constant rate, where an induction head forms within a minute or
two, and its shipped model trained longer (`shipped_recipe`). Fresh random examples every step. The command stops
when greedy decoding gets every validation example right (twice in a row) or at the recipe's last step, then writes
the weights of the best validation run as a toy model folder (model.safetensors, config.json):
model/toy/models/<task>/ unless --out names another. The Train page (app_pages/train.py) trains with the same
recipes, step by step (`Optimising`).
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from attention_atlas.model.core.masks import causal_mask, combine, padding_mask
from attention_atlas.model.scratch.config import TransformerConfig
from attention_atlas.model.scratch.tokenizer import CharTokenizer
from attention_atlas.model.scratch.transformer import EncoderDecoder, build_model
from attention_atlas.model.toy.evaluate import exact_match, pad_batch
from attention_atlas.model.toy.seeding import OwnGenerator
from attention_atlas.model.toy.settings import TrainSettings
from attention_atlas.model.toy.store import ToyModel, save_toy, toy_dir
from attention_atlas.model.toy.tasks import TASKS, make_examples

IGNORE = -100  # label of positions that carry no loss
TRAIN_SEED, VALIDATION_SEED = TrainSettings.seed, 1  # held-out tests use yet another seed


@dataclass(frozen=True)
class Recipe:
    """What a training run builds and how it trains it."""

    task: str
    config: TransformerConfig
    settings: TrainSettings


def recipe_for(task_name: str) -> Recipe:
    """The recipe a task trains with by default (the Train page's and the command's): the task's own model and
    settings."""
    task = TASKS[task_name]
    return Recipe(task_name, task.model(len(CharTokenizer(task.chars)), task.kind), task.settings)


def shipped_recipe(task_name: str) -> Recipe:
    """The recipe the task's shipped model was trained with (`attention-atlas train --all`, `make train`)."""
    recipe = recipe_for(task_name)
    steps = TASKS[task_name].shipped_steps or recipe.settings.steps
    return replace(recipe, settings=replace(recipe.settings, steps=steps))


def learning_rate(step: int, s: TrainSettings) -> float:
    """Constant: peak_lr. Paper: lrate ∝ min(step^-0.5, step * warmup^-1.5) (§5.3), scaled to peak at peak_lr."""
    if s.schedule == "constant":
        return s.peak_lr
    step = max(step, 1)
    return s.peak_lr * min(step / s.warmup, (s.warmup / step) ** 0.5)


@dataclass(frozen=True)
class BatchResult:
    loss: torch.Tensor  # mean cross-entropy over the target tokens (with the label smoothing asked for)
    accuracy: float  # share of target tokens whose most likely prediction is right (the model reads the target)


def batch_result(toy: ToyModel, pairs: list[tuple[str, str]], label_smoothing: float) -> BatchResult:
    """The loss and token accuracy of a batch, each target token predicted from the tokens before it."""
    tok, model = toy.tokenizer, toy.model
    if isinstance(model, EncoderDecoder):
        src = pad_batch([toy.encode_source(s) for s, _ in pairs], tok.pad_id)
        tgt = pad_batch([[tok.bos_id, *toy.encode_target(t)] for _, t in pairs], tok.pad_id)
        tgt_in, labels = tgt[:, :-1], tgt[:, 1:].masked_fill(tgt[:, 1:] == tok.pad_id, IGNORE)
        src, tgt_in, labels = (t.to(model.device) for t in (src, tgt_in, labels))
        src_mask = padding_mask(src, tok.pad_id)
        tgt_mask = combine(padding_mask(tgt_in, tok.pad_id), causal_mask(tgt_in.size(1), model.device))
        log_probs = model(src, tgt_in, src_mask, tgt_mask, src_mask)
    else:
        rows, label_rows = [], []
        for source, target in pairs:
            prompt, answer = toy.encode_source(source), toy.encode_target(target)
            rows.append(prompt + answer)
            label_rows.append([IGNORE] * (len(prompt) - 1) + answer + [IGNORE])
        seq = pad_batch(rows, tok.pad_id)
        labels = pad_batch(label_rows, IGNORE)[:, : seq.size(1) - 1].to(model.device)
        ids = seq[:, :-1].to(model.device)
        log_probs = model(ids, combine(padding_mask(ids, tok.pad_id), causal_mask(ids.size(1), ids.device)))
    counted = labels != IGNORE  # (batch, len)
    loss = F.cross_entropy(log_probs.reshape(-1, log_probs.size(-1)), labels.reshape(-1), ignore_index=IGNORE,
                           label_smoothing=label_smoothing)
    right = (log_probs.argmax(dim=-1) == labels) & counted
    return BatchResult(loss, float(right.sum() / counted.sum()))


class Optimising:
    """A fresh toy model of a recipe and its optimiser, trained one step at a time (`advance`)."""

    def __init__(self, recipe: Recipe, device: str | torch.device = "cpu") -> None:
        self.recipe, self.settings = recipe, recipe.settings
        task = TASKS[recipe.task]
        generator = torch.Generator().manual_seed(self.settings.seed)  # the initial weights', then dropout's draws
        with OwnGenerator(generator):  # torch's global generator is neither reseeded nor drawn from
            model = build_model(recipe.config).to(device)
        if model.device.type != "cpu":  # dropout's masks are drawn where the model is
            generator = torch.Generator(model.device).manual_seed(self.settings.seed)
        self._draws = OwnGenerator(generator)
        self.toy = ToyModel(task, CharTokenizer(task.chars), model)
        self.optimiser = torch.optim.Adam(model.parameters(), lr=self.settings.peak_lr, betas=(0.9, 0.98), eps=1e-9)
        self.rng = random.Random(self.settings.seed)
        self.step = 0  # optimiser steps taken

    def advance(self) -> tuple[float, float]:
        """One optimiser step on a fresh batch; returns its (loss, token accuracy), measured before the step."""
        self.step += 1
        model, s = self.toy.model, self.settings
        model.train()
        for group in self.optimiser.param_groups:
            group["lr"] = learning_rate(self.step, s)
        pairs = [self.toy.task.sample(self.rng) for _ in range(s.batch_size)]
        with self._draws:
            result = batch_result(self.toy, pairs, s.label_smoothing)
        self.optimiser.zero_grad(set_to_none=True)
        result.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        self.optimiser.step()
        return float(result.loss.detach()), result.accuracy


def train(recipe: Recipe) -> ToyModel:
    """Train a fresh toy model of `recipe` and return it in eval mode with its training record: the weights of
    its best validation run, stopping early once two runs in a row are perfect."""
    s = recipe.settings
    run = Optimising(recipe)
    toy = run.toy
    validation = make_examples(toy.task, s.validation_size, VALIDATION_SEED)
    start, perfect_runs, accuracy = time.perf_counter(), 0, 0.0
    best_accuracy, best_step, best_weights = -1.0, 0, {}

    def validate() -> float:
        """Exact match on the validation set; remembers the best weights so far."""
        nonlocal best_accuracy, best_step, best_weights
        toy.model.eval()
        result = exact_match(toy, validation)
        if result > best_accuracy:
            best_accuracy, best_step, best_weights = result, run.step, copy.deepcopy(toy.model.state_dict())
        return result

    bar = tqdm(range(1, s.steps + 1), desc=f"train {recipe.task}", unit="step")
    for _ in bar:
        loss, _ = run.advance()
        if run.step % s.eval_every == 0:
            accuracy = validate()
            perfect_runs = perfect_runs + 1 if accuracy == 1.0 else 0
        bar.set_postfix(loss=f"{loss:.3f}", exact=f"{accuracy:.1%}")
        if perfect_runs >= 2 or time.perf_counter() - start > s.minutes * 60:
            break
    bar.close()
    if run.step % s.eval_every:
        validate()
    toy.model.load_state_dict(best_weights)
    toy.model.eval()
    toy.training = training_record(run, time.perf_counter() - start, best_accuracy) | {"best_step": best_step}
    return toy


def training_record(run: Optimising, seconds: float, exact: float) -> dict[str, object]:
    """What a saved toy model says of its training (the model card shows it)."""
    s = run.settings
    return {
        "steps": run.step,
        "seconds": round(seconds, 1),
        "seed": s.seed,
        "batch_size": s.batch_size,
        "learning_rate": s.peak_lr,
        "schedule": s.schedule,
        "label_smoothing": s.label_smoothing,
        "validation_exact_match": exact,
        "parameters": sum(p.numel() for p in run.toy.model.parameters()),
    }


def main(argv: list[str] | None = None) -> None:
    """`attention-atlas train` (attention_atlas/cli.py runs it)."""
    parser = argparse.ArgumentParser(prog="attention-atlas train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", choices=sorted(TASKS))
    which.add_argument("--all", action="store_true",
                       help="every task in turn, each with its shipped model's recipe, into model/toy/models/")
    parser.add_argument("--out", type=Path, help="the folder to write (default: model/toy/models/<task>)")
    parser.add_argument("--seed", type=int, default=TRAIN_SEED)
    parser.add_argument("--steps", type=int, help="most optimiser steps (default: the task's recipe)")
    parser.add_argument("--minutes", type=float, default=TrainSettings.minutes)
    args = parser.parse_args(argv)
    if args.all and args.out:
        parser.error("--out names one task's folder: give it with --task")
    # One thread: the matrices are tiny, and extra threads only spin and slow down when cores are busy.
    torch.set_num_threads(1)
    recipes = [shipped_recipe(name) for name in TASKS] if args.all else [recipe_for(args.task)]
    for recipe in recipes:
        settings = replace(recipe.settings, seed=args.seed, minutes=args.minutes,
                           steps=args.steps or recipe.settings.steps)
        train_and_save(replace(recipe, settings=settings), args.out)


def train_and_save(recipe: Recipe, out: Path | None) -> None:
    """Train `recipe` and write its model to `out` (default: the task's shipped folder), saying where and how well."""
    toy = train(recipe)
    folder = save_toy(toy, out or toy_dir(recipe.task))
    t = toy.training
    print(f"saved {folder}: {t['steps']} steps in {t['seconds']} s, weights of step {t['best_step']} "
          f"(validation exact match {t['validation_exact_match']:.1%})")
