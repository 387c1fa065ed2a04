"""A short training on the GPU (model/toy/train.py's recipes, the Train page's thread): the same first loss as on the
CPU from the same weights and batch, a falling loss, and a trained model that traces on the GPU as on the CPU."""

from __future__ import annotations

import copy
from dataclasses import replace
from statistics import mean

import torch

from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.toy.live import LiveTraining
from attention_atlas.model.toy.runner import ToyRunner
from attention_atlas.model.toy.store import ToyModel
from attention_atlas.model.toy.tasks import make_examples
from attention_atlas.model.toy.train import Optimising, recipe_for
from tests.gpu.compare import FLOAT32, assert_same_hooks
from tests.gpu.models import DEVICE

STEPS = 60  # the induction recipe at batch 32: its mean loss falls from about 4.7 over the first 10 to 3.3 over the
# last 10 on the CPU


def short_recipe(steps: int = STEPS):
    """The induction recipe (no dropout, no label smoothing: one step computes the same loss on either device) at
    batch 32."""
    recipe = recipe_for("induction")
    return replace(recipe, settings=replace(recipe.settings, steps=steps, batch_size=32))


def test_a_short_training_on_the_gpu_lowers_the_loss_from_the_cpus_first() -> None:
    on_gpu, on_cpu = Optimising(short_recipe(), DEVICE), Optimising(short_recipe(), "cpu")
    assert {p.device.type for p in on_gpu.toy.model.parameters()} == {torch.device(DEVICE).type}
    (gpu_loss, gpu_accuracy), (cpu_loss, cpu_accuracy) = on_gpu.advance(), on_cpu.advance()
    assert abs(gpu_loss - cpu_loss) < 1e-4 and abs(gpu_accuracy - cpu_accuracy) < 0.02  # same weights, same batch
    losses = [gpu_loss, *(on_gpu.advance()[0] for _ in range(STEPS - 1))]
    assert all(loss == loss for loss in losses)  # no NaN
    assert mean(losses[-10:]) < 0.85 * mean(losses[:10]), losses
    trained = on_gpu.toy
    trained.model.eval()
    on_host = ToyModel(trained.task, trained.tokenizer, copy.deepcopy(trained.model).cpu().eval())
    (text, target), = make_examples(trained.task, 1, seed=5)  # read, not generated: a barely trained model's greedy
    options = RunOptions(hooks=("*",))  # choices may be ties
    ours = ToyRunner("trained", trained).run(text, target, options)
    assert_same_hooks(ours, ToyRunner("trained", on_host).run(text, target, options), FLOAT32)


def test_the_train_pages_run_trains_on_the_gpu_with_snapshots() -> None:
    training = LiveTraining(short_recipe(40), snapshot_every=20, device=DEVICE)
    assert training.join(300), "training did not end in 5 minutes"
    assert training.status == "finished", training.message
    assert training.step == 40 and [s.step for s in training.snapshots] == [0, 20, 40]
    assert mean(training.losses[-10:]) < mean(training.losses[:10])
    assert next(training.result.model.parameters()).device.type == torch.device(DEVICE).type
    model = training.snapshot_model(training.snapshots[1])
    assert next(model.model.parameters()).device.type == torch.device(DEVICE).type
