"""What live snapshots cost a training: `python -m bench.train_snapshots`.

The Train page's induction recipe, STEPS steps in a LiveTraining thread, two ways in turn, ROUNDS times each: with
a snapshot of every head on the probe example (and the weights) every SNAPSHOT_EVERY steps, as the page's default
takes them, and with none but the first and the last. One thread for torch, as the command-line trainer uses.

Output: steps per second each way (the median of the rounds) and their ratio without / with (target <= 1.1).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import torch

from attention_atlas.model.toy.live import LiveTraining
from attention_atlas.model.toy.train import recipe_for

STEPS = 600
SNAPSHOT_EVERY = 50  # the page's default for the induction task: its 3,000 steps / 60
ROUNDS = 3


def steps_per_second(snapshot_every: int) -> float:
    recipe = recipe_for("induction")
    training = LiveTraining(replace(recipe, settings=replace(recipe.settings, steps=STEPS)), snapshot_every)
    training.join()
    assert training.status == "finished", training.message
    return STEPS / training.seconds


def main() -> None:
    torch.set_num_threads(1)
    steps_per_second(STEPS)  # warm-up
    with_snapshots, without = [], []
    for _ in range(ROUNDS):
        with_snapshots.append(steps_per_second(SNAPSHOT_EVERY))
        without.append(steps_per_second(STEPS * 10))  # only the first and the last snapshot
    fast, slow = statistics.median(without), statistics.median(with_snapshots)
    print(f"induction recipe, {STEPS} steps, median of {ROUNDS} rounds taken in turn")
    print(f"  no snapshots:                  {fast:6.1f} steps/s")
    print(f"  a snapshot every {SNAPSHOT_EVERY} steps:     {slow:6.1f} steps/s")
    print(f"  ratio (target <= 1.1):         {fast / slow:6.3f}")


if __name__ == "__main__":
    main()
