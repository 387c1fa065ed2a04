"""How a toy model trains: the optimiser's settings of a run (a task's own are in `model/toy/tasks.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Schedule = Literal["paper", "constant"]
SCHEDULES: dict[Schedule, str] = {
    "paper": "warm-up, then 1/√step (the paper's)",
    "constant": "constant",
}


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 3500  # most optimiser steps (about 5 minutes on a 2-core CPU for the shipped tasks)
    minutes: float = 15.0  # wall-clock cap, for a much slower or busy machine
    batch_size: int = 64  # examples per step
    peak_lr: float = 2e-3  # learning rate at the end of warm-up (constant: the rate throughout)
    schedule: Schedule = "paper"
    warmup: int = 400  # warm-up steps (paper: 4000 for its much larger runs)
    label_smoothing: float = 0.1  # epsilon_ls (paper §5.4)
    eval_every: int = 250  # steps between validation runs
    validation_size: int = 300  # examples per validation run
    seed: int = 0  # of the initial weights and of the training examples (the shipped models': train.TRAIN_SEED)
