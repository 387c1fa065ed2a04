"""A training run in a background thread, followed while it runs: the loss and accuracy of every step, and every
so often a snapshot of every head's attention on the task's probe example with the heads' scores
(model/toy/head_scores.py). Pause, resume and stop between steps; bounded in steps, time, size and memory; ended
by its owner's going, paused or not."""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.scratch.transformer import build_model
from attention_atlas.model.toy.evaluate import exact_match
from attention_atlas.model.toy.head_scores import Score, probe_scores
from attention_atlas.model.toy.runner import ToyRunner
from attention_atlas.model.toy.store import ToyModel, size_problems
from attention_atlas.model.toy.tasks import make_examples
from attention_atlas.model.toy.train import VALIDATION_SEED, Optimising, Recipe, training_record

LOG = logging.getLogger(__name__)
Status = Literal["running", "paused", "evaluating", "finished", "stopped", "failed"]  # evaluating: the result's
# exact match on held-out examples, after the last step
CHUNK_S = 0.1  # steps run under one hold of the run slot before others get their turn
ASK_EVERY_S = 0.5  # how often a paused run asks whether its session is still there
GONE: tuple[Status, str] = ("stopped", "stopped: its session has ended")  # how a run ends without a result
VALIDATION_SIZE = 200  # held-out examples whose exact match the finished model is given


@dataclass(frozen=True)
class Limits:
    """What one training run may take of a shared server (the Train page shows them)."""

    max_steps: int = 20_000
    max_minutes: float = 10.0  # of training, pauses not counted
    max_parameters: int = 2_000_000
    max_batch_size: int = 256
    max_snapshots: int = 64  # beyond, every other snapshot is let go and the interval doubles
    snapshot_weight_bytes: int = 64 * 2**20  # weights kept with the snapshots at most (else the final model only)


@dataclass(frozen=True)
class Snapshot:
    """The model at one step, seen through the probe example."""

    step: int
    patterns: dict[str, np.ndarray]  # site -> (layers, heads, q_len, k_len) attention weights on the probe
    scores: dict[tuple[str, str], np.ndarray]  # (score name, site) -> (layers, heads)
    weights: dict[str, torch.Tensor] | None  # CPU copies of the weights then; None where too large to keep


def parameter_count(recipe: Recipe) -> int:
    """The parameters of the recipe's model, counted without allocating them."""
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(recipe.config).parameters())


def training_problems(recipe: Recipe, snapshot_every: int, limits: Limits) -> list[str]:
    """What in a recipe (and its snapshot interval) a person must change before it can train here, in words ([] when
    nothing)."""
    s = recipe.settings
    problems = size_problems(recipe.config)
    if snapshot_every < 1:
        problems.append(f"snapshots must come every 1 step or more, not {snapshot_every}")
    if not 1 <= s.steps <= limits.max_steps:
        problems.append(f"steps must be from 1 to {limits.max_steps:,}, not {s.steps:,}")
    if not 1 <= s.batch_size <= limits.max_batch_size:
        problems.append(f"the batch size must be from 1 to {limits.max_batch_size}, not {s.batch_size}")
    if not 0 < s.peak_lr <= 1:
        problems.append(f"the learning rate must be above 0 and at most 1, not {s.peak_lr}")
    if not 0 <= s.label_smoothing < 1:
        problems.append(f"label smoothing must be from 0 to below 1, not {s.label_smoothing}")
    if s.schedule == "paper" and s.warmup < 1:
        problems.append("the paper's schedule needs at least one warm-up step")
    parameters = 0 if problems else parameter_count(recipe)  # sizes over their caps are named already
    if parameters > limits.max_parameters:
        problems.append(f"the model would have {parameters:,} parameters; the most is {limits.max_parameters:,}")
    return problems


def as_sentence(problems: list[str]) -> str:
    """The problems as one message (they begin with names such as d_model: no capital is added)."""
    return "Before it can train: " + "; ".join(problems) + "."


class LiveTraining:
    """One training run in its own thread. Read `losses`, `accuracies`, `snapshots`, `status` while it runs;
    `result` is the trained model (eval mode, never trained further) once it has finished or was stopped.

    slot: held whenever the model computes (the first snapshot, each CHUNK_S of steps, the last snapshot and the
    evaluation): the server's run slots, so that training takes turns with people's runs;
    alive: asked between steps and, while paused, every ASK_EVERY_S; False stops the run with no result (its
    session has ended)."""

    def __init__(self, recipe: Recipe, snapshot_every: int, device: str | torch.device = "cpu",
                 limits: Limits = Limits(), slot: Callable[[], AbstractContextManager] = contextlib.nullcontext,
                 alive: Callable[[], bool] = lambda: True) -> None:
        problems = training_problems(recipe, snapshot_every, limits)
        if problems:
            raise ValueError(as_sentence(problems))
        self.recipe, self.limits, self.snapshot_every = recipe, limits, snapshot_every
        self.validation_examples = VALIDATION_SIZE  # the finished model's exact match is measured on these many
        self._slot, self._alive = slot, alive
        self._optimising = Optimising(recipe, device)
        toy = self._optimising.toy
        self._probe = ToyRunner("probe", toy)  # runs the model as it trains (the same object), for the snapshots
        self.parameters = sum(p.numel() for p in toy.model.parameters())
        self._keeps_weights = self.parameters * 4 * limits.max_snapshots <= limits.snapshot_weight_bytes
        self.losses: list[float] = []  # per step
        self.accuracies: list[float] = []  # per step: share of target tokens predicted right
        self.snapshots: list[Snapshot] = []
        self.scores: list[Score] = []  # what each snapshot scores (set by the first)
        self.probe_tokens: dict[str, tuple[list[str], list[str]]] = {}  # site -> its query and key tokens
        self.probe_masks: dict[str, np.ndarray] = {}  # site -> (q_len, k_len) bool, True = may attend
        self.run_id = uuid.uuid4().hex  # this run's identity (an id() is reused once its object is collected)
        self._lock = threading.Lock()  # around every change of status (the thread's and the person's)
        self._status: Status = "running"
        self.message = ""  # why it stopped, when it did not finish
        self.seconds = 0.0  # spent training, pauses not counted
        self.result: ToyModel | None = None
        self._stop, self._running = threading.Event(), threading.Event()
        self._running.set()
        self._thread = threading.Thread(target=self._work, name="atlas-train", daemon=True)
        self._thread.start()

    @property
    def step(self) -> int:
        return len(self.losses)

    @property
    def status(self) -> Status:
        return self._status

    @property
    def done(self) -> bool:
        return self._status in ("finished", "stopped", "failed")

    def pause(self) -> None:
        with self._lock:
            if self._status == "running":  # a pause asked once the last step is taken is too late: the run finishes
                self._running.clear()
                self._status = "paused"

    def resume(self) -> None:
        with self._lock:
            if self._status == "paused":
                self._status = "running"
                self._running.set()

    def stop(self) -> None:
        """Stop after the current step; the model trained so far becomes the result."""
        self._stop.set()
        self._running.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end, at most `timeout` seconds; whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def snapshot_model(self, snapshot: Snapshot) -> ToyModel:
        """A model with a snapshot's weights (eval mode), to open like any other."""
        if snapshot.weights is None:
            raise ValueError("this snapshot's weights were not kept (the model is too large to keep them all)")
        toy = self._optimising.toy
        model = build_model(self.recipe.config)
        model.load_state_dict(snapshot.weights)
        model.to(toy.model.device).eval()
        return ToyModel(toy.task, toy.tokenizer, model, {"steps": snapshot.step, "snapshot": True})

    # -- the thread --------------------------------------------------------------------------------
    def _work(self) -> None:
        """The run; its status says it is done only once its result is there."""
        try:
            with self._slot():
                self._take_snapshot()
            ending = self._train()
            if not self._alive():
                ending = GONE
            else:
                self._set("evaluating")
                with self._slot():
                    if self.snapshots[-1].step != self.step:  # stopped between snapshots: the timeline ends here
                        self._take_snapshot()
                    self._finish()
            self._set(*ending)
        except Exception as error:  # shown on the page; the server goes on
            LOG.exception("training failed")
            self._set("failed", f"{type(error).__name__}: {error}")

    def _set(self, status: Status, message: str = "") -> None:
        with self._lock:
            self.message = message  # first: a reader of the status finds its message
            self._status = status

    def _train(self) -> tuple[Status, str]:
        """Steps until the last, a stop, the time limit or the session's end (asked while paused too); returns how
        it ended (status, message)."""
        steps = self.recipe.settings.steps
        while self.step < steps:
            if not self._alive():
                return GONE
            if not self._running.wait(ASK_EVERY_S):  # paused
                continue
            if self._stop.is_set():
                return "stopped", "stopped before its last step"
            if self.seconds >= self.limits.max_minutes * 60:
                return "stopped", f"stopped at the time limit of {self.limits.max_minutes:g} min"
            with self._slot():
                started = time.perf_counter()
                while self.step < steps and self._running.is_set() and time.perf_counter() - started < CHUNK_S:
                    loss, accuracy = self._optimising.advance()
                    self.losses.append(loss)
                    self.accuracies.append(accuracy)
                    if self.step % self.snapshot_every == 0 or self.step == steps:
                        self._take_snapshot()
                self.seconds += time.perf_counter() - started
            time.sleep(0.001)  # a run waiting for the slot takes it now
        return "finished", ""

    def _take_snapshot(self) -> None:
        toy = self._optimising.toy
        toy.model.eval()
        source, target = toy.task.probe
        with torch.no_grad():
            trace = self._probe.run(source, target, RunOptions(hooks=("*.hook_pattern",)))
        patterns = {site: np.stack([trace.pattern(site, layer) for layer in range(trace.n_layers(site))])
                    for site in trace.sites()}  # site -> (layers, heads, q_len, k_len)
        if not self.scores:
            self.probe_tokens = {site: (trace.query_tokens(site), trace.key_tokens(site)) for site in patterns}
            self.probe_masks = dict(trace.masks)
            self.scores = probe_scores(toy.task, {site: p.shape[2:] for site, p in patterns.items()})
        weights = ({name: value.detach().to("cpu", copy=True) for name, value in toy.model.state_dict().items()}
                   if self._keeps_weights else None)
        scores = {(score.name, score.site): score.of(patterns[score.site]) for score in self.scores}
        self.snapshots.append(Snapshot(self.step, patterns, scores, weights))
        if len(self.snapshots) > self.limits.max_snapshots:  # every other one, the first and the newest kept
            self.snapshots = [*self.snapshots[:-1:2], self.snapshots[-1]]
            self.snapshot_every *= 2

    def _finish(self) -> None:
        toy = self._optimising.toy
        toy.model.eval()
        exact = exact_match(toy, make_examples(toy.task, self.validation_examples, VALIDATION_SEED))
        record = training_record(self._optimising, self.seconds, exact)
        self.result = ToyModel(toy.task, toy.tokenizer, copy.deepcopy(toy.model).eval(), record)
