"""Train a toy model on CPU in minutes: `python -m model.toy.train --task reverse`.

Adam (beta2 = 0.98, eps = 1e-9) with the paper's warm-up-then-inverse-square-root learning rate,
label smoothing 0.1, fresh random examples every step. Stops when greedy decoding gets every
validation example right (twice in a row) or after 3,500 steps (about 5 minutes on a 2-core CPU),
then writes model/toy/models/<task>/{model.safetensors, config.json} with the weights of the best
validation run.
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from model.core.masks import causal_mask, combine, padding_mask
from model.scratch.config import TransformerConfig
from model.scratch.tokenizer import CharTokenizer
from model.scratch.transformer import EncoderDecoder, build_model
from model.toy.evaluate import exact_match, pad_batch
from model.toy.store import TOY_DIR, ToyModel, save_toy
from model.toy.tasks import TASKS, make_examples

IGNORE = -100  # label of positions that carry no loss
TRAIN_SEED, VALIDATION_SEED = 0, 1  # held-out tests use yet another seed


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 3500  # most optimiser steps (about 5 minutes on a 2-core CPU)
    minutes: float = 15.0  # wall-clock cap, for a much slower or busy machine
    batch_size: int = 64  # examples per step
    peak_lr: float = 2e-3  # learning rate at the end of warm-up
    warmup: int = 400  # warm-up steps (paper: 4000 for its much larger runs)
    label_smoothing: float = 0.1  # epsilon_ls (paper §5.4)
    eval_every: int = 250  # steps between validation runs
    validation_size: int = 300  # examples per validation run


def learning_rate(step: int, s: TrainSettings) -> float:
    """lrate ∝ min(step^-0.5, step * warmup^-1.5) (paper §5.3), scaled so that it peaks at peak_lr."""
    step = max(step, 1)
    return s.peak_lr * min(step / s.warmup, (s.warmup / step) ** 0.5)


def batch_loss(toy: ToyModel, pairs: list[tuple[str, str]], label_smoothing: float) -> torch.Tensor:
    """Mean cross-entropy of the next target token over the target positions of a batch."""
    tok, model = toy.tokenizer, toy.model
    if isinstance(model, EncoderDecoder):
        src = pad_batch([toy.encode_source(s) for s, _ in pairs], tok.pad_id)
        tgt = pad_batch([[tok.bos_id, *toy.encode_target(t)] for _, t in pairs], tok.pad_id)
        tgt_in, labels = tgt[:, :-1], tgt[:, 1:].masked_fill(tgt[:, 1:] == tok.pad_id, IGNORE)
        src_mask = padding_mask(src, tok.pad_id)
        tgt_mask = combine(padding_mask(tgt_in, tok.pad_id), causal_mask(tgt_in.size(1)))
        log_probs = model(src, tgt_in, src_mask, tgt_mask, src_mask)
    else:
        rows, label_rows = [], []
        for source, target in pairs:
            prompt, answer = toy.encode_source(source), toy.encode_target(target)
            rows.append(prompt + answer)
            label_rows.append([IGNORE] * (len(prompt) - 1) + answer + [IGNORE])
        seq = pad_batch(rows, tok.pad_id)
        labels = pad_batch(label_rows, IGNORE)[:, : seq.size(1) - 1]
        ids = seq[:, :-1]
        log_probs = model(ids, combine(padding_mask(ids, tok.pad_id), causal_mask(ids.size(1))))
    return F.cross_entropy(
        log_probs.reshape(-1, log_probs.size(-1)), labels.reshape(-1), ignore_index=IGNORE,
        label_smoothing=label_smoothing,
    )


def train(task_name: str, settings: TrainSettings, seed: int = TRAIN_SEED) -> ToyModel:
    """Train a fresh toy model on `task_name` and return it in eval mode with its training record."""
    torch.manual_seed(seed)
    task = TASKS[task_name]
    tokenizer = CharTokenizer(task.chars)
    toy = ToyModel(task, tokenizer, build_model(TransformerConfig.toy(len(tokenizer), kind=task.kind)))
    optimiser = torch.optim.Adam(toy.model.parameters(), lr=settings.peak_lr, betas=(0.9, 0.98), eps=1e-9)
    rng = random.Random(seed)
    validation = make_examples(task, settings.validation_size, VALIDATION_SEED)
    start, perfect_runs, accuracy, step = time.perf_counter(), 0, 0.0, 0
    best_accuracy, best_step, best_weights = -1.0, 0, {}

    def validate() -> float:
        """Exact match on the validation set; remembers the best weights so far."""
        nonlocal best_accuracy, best_step, best_weights
        toy.model.eval()
        result = exact_match(toy, validation)
        if result > best_accuracy:
            best_accuracy, best_step, best_weights = result, step, copy.deepcopy(toy.model.state_dict())
        return result

    bar = tqdm(range(1, settings.steps + 1), desc=f"train {task_name}", unit="step")
    for step in bar:
        toy.model.train()
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(step, settings)
        loss = batch_loss(toy, [task.sample(rng) for _ in range(settings.batch_size)], settings.label_smoothing)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(toy.model.parameters(), 1.0)
        optimiser.step()
        if step % settings.eval_every == 0:
            accuracy = validate()
            perfect_runs = perfect_runs + 1 if accuracy == 1.0 else 0
        bar.set_postfix(loss=f"{loss.item():.3f}", exact=f"{accuracy:.1%}")
        if perfect_runs >= 2 or time.perf_counter() - start > settings.minutes * 60:
            break
    bar.close()
    if step % settings.eval_every:
        validate()
    toy.model.load_state_dict(best_weights)
    toy.model.eval()
    toy.training = {
        "steps": step,
        "best_step": best_step,
        "seconds": round(time.perf_counter() - start, 1),
        "seed": seed,
        "batch_size": settings.batch_size,
        "validation_exact_match": best_accuracy,
        "parameters": sum(p.numel() for p in toy.model.parameters()),
    }
    return toy


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=sorted(TASKS))
    parser.add_argument("--out", type=Path, default=TOY_DIR, help="folder that receives <task>/ (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=TRAIN_SEED)
    parser.add_argument("--steps", type=int, default=TrainSettings.steps)
    parser.add_argument("--minutes", type=float, default=TrainSettings.minutes)
    args = parser.parse_args(argv)
    # One thread: the matrices are tiny, and extra threads only spin and slow down when cores are busy.
    torch.set_num_threads(1)
    toy = train(args.task, TrainSettings(steps=args.steps, minutes=args.minutes), seed=args.seed)
    folder = save_toy(toy, args.out)
    t = toy.training
    print(f"saved {folder}: {t['steps']} steps in {t['seconds']} s, weights of step {t['best_step']} "
          f"(validation exact match {t['validation_exact_match']:.1%})")


if __name__ == "__main__":
    main()
