"""A run sent to NDIF, against a fake of the service (no network): nnsight's RemoteBackend serialises the request as
it would send it, the fake answers with NDIF's status stream (received, queued, running, then completed or error) and
runs the request here. The statuses are told as the run's progress, in order; the service's refusals (its limits,
its key check, a model it is not running) become sentences; a wait is stopped by whoever follows it, or by its
deadline, and the stream is closed either way; the model every session shares keeps neither the key nor the text."""

from __future__ import annotations

import gc
import io
import sys
import types
import uuid
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch
import zstandard

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import RunOptions
from attention_atlas.model.ndif.backends import Simulated
from attention_atlas.model.ndif.opening import open_ndif
from attention_atlas.model.ndif.status import following, using_key
from attention_atlas.model.ndif.transfer import transfer_of

pytestmark = pytest.mark.slow  # opening a model on NDIF builds and probes its twin and loads nnsight: seconds
TEXT = "the quick brown fox"
OPTIONS = RunOptions(hooks=("*.hook_pattern",), summarised=True)


class Stopped(Exception):
    """What a follower raises to stop a wait."""


@pytest.fixture(scope="module")
def runners(folders) -> tuple:
    """The tiny Llama simulated, and the same model as if opened to send (its hub id made up)."""
    simulated = open_ndif(str(folders["llama"]), simulate=True)
    sent = open_ndif(str(folders["llama"]), simulate=True)
    sent.hosted = replace(sent.hosted, simulate=False)
    sent.hosted.model.to_model_key = lambda: "nnsight.modeling.transformers.TransformersModel:{}"
    return simulated, sent


@pytest.fixture
def service(monkeypatch, runners) -> dict:
    """The fake: `statuses` ((status, description) ...) streamed after the request is serialised, each waited on
    `refreshes` times; past them all, the request is run here and COMPLETED sent. `closed` counts closed streams."""
    from nnsight.intervention.backends.remote import RemoteBackend
    from nnsight.schema.response import ResponseModel, Status

    fake = {"statuses": [("RECEIVED", ""), ("QUEUED", ""), ("RUNNING", "")], "refreshes": 0, "closed": 0}

    def request(self, request_model, tracer):
        self._serialize(tracer)
        try:
            for status, description in fake["statuses"]:
                for _ in range(fake["refreshes"]):
                    self.display.refresh()
                self.handle(ResponseModel(id="job", status=Status(status), description=description))
            Simulated(runners[1].hosted.model)(tracer)  # NDIF runs it; its saved values reach the frame
            buffer = io.BytesIO()
            torch.save({}, buffer, pickle_protocol=4)  # as NDIF writes a result (the values reached the frame)
            data = zstandard.ZstdCompressor().compress(buffer.getvalue()) if self.compress else buffer.getvalue()
            return self.handle(ResponseModel(id="job", status=Status.COMPLETED, data=data))
        finally:
            fake["closed"] += 1

    monkeypatch.setattr(RemoteBackend, "request", request)
    return fake


def test_a_run_sent_follows_ndifs_statuses_and_equals_the_simulated_run(runners, service) -> None:
    simulated, sent = runners
    told: list[str] = []
    with using_key("a-key"), following(told.append):
        ours = sent.run(TEXT, None, OPTIONS)
    assert told[:3] == ["NDIF: received", "NDIF: queued", "NDIF: running"]
    assert told[-1] == "NDIF: completed" and service["closed"] == 1
    theirs = simulated.run(TEXT, None, OPTIONS)
    assert np.abs(ours.summaries["decoder.attn"].thumbnails - theirs.summaries["decoder.attn"].thumbnails).max() < 1e-6
    assert ours.output_text == theirs.output_text and not transfer_of(ours).simulated
    assert transfer_of(ours).sent > 1_000  # the request as nnsight serialised it to send


@pytest.mark.parametrize(("description", "said"), [
    ("Rate limit exceeded (429)", "NDIF refused the run: it is over one of its limits (Rate limit exceeded"),
    ("Invalid API key", "NDIF did not accept the API key"),
    ("Model meta-llama/Llama-3.1-405B is not running", "NDIF is not taking this run now"),
    ("CUDA out of memory", "NDIF refused the run: CUDA out of memory"),
])
def test_the_services_errors_are_sentences(runners, service, description, said) -> None:
    service["statuses"] = [("RECEIVED", ""), ("QUEUED", ""), ("ERROR", description)]
    told: list[str] = []
    with using_key("a-key"), following(told.append), pytest.raises(UserError) as refused:
        runners[1].run(TEXT, None, OPTIONS)
    assert str(refused.value).startswith(said)
    assert told == ["NDIF: received", "NDIF: queued", "NDIF: error"] and service["closed"] == 1


def test_a_wait_stops_when_its_follower_says_so_or_at_its_deadline(runners, service) -> None:
    service["refreshes"] = 3  # the stream waits a while at each status

    def follow(words: str) -> None:
        if words.startswith("NDIF: queued ("):  # the person pressed Stop while the run was queued
            raise Stopped

    with using_key("a-key"), following(follow), pytest.raises(Stopped):
        runners[1].run(TEXT, None, OPTIONS)
    assert service["closed"] == 1
    sent = runners[1]
    sent.hosted = replace(sent.hosted, timeout_s=0.0)
    try:
        with using_key("a-key"), pytest.raises(UserError, match="NDIF did not finish the run within 0 s"):
            sent.run(TEXT, None, OPTIONS)
    finally:
        sent.hosted = replace(sent.hosted, timeout_s=600.0)
    assert service["closed"] == 2


def reachable(root: object) -> Iterator[object]:
    """Every object reachable from `root` (no classes, modules or modules' globals: what every session shares
    anyway)."""
    seen, stack = set(), [root]
    while stack:
        found = stack.pop()
        if id(found) in seen or isinstance(found, type | types.ModuleType):
            continue
        seen.add(id(found))
        if isinstance(found, dict) and getattr(sys.modules.get(str(found.get("__name__"))), "__dict__", None) is found:
            continue
        yield found
        stack.extend(gc.get_referents(found))


def test_a_run_leaves_no_key_and_no_text_on_the_model_every_session_shares(runners, service) -> None:
    sent = runners[1]
    key, text = f"key-{uuid.uuid4().hex}", "zebra fox saw the dog"
    with using_key(key):
        trace = sent.run(text, None, OPTIONS)
        trace.head_pattern("decoder.attn", 1, 0)  # a layer fetched too
    ids = sent.text.encode(text)
    del trace
    gc.collect()
    for found in reachable(sent):
        assert not (isinstance(found, str) and key in found)
        assert not (isinstance(found, list | tuple) and list(found) == ids)
        assert not (isinstance(found, torch.Tensor) and found.numel() == len(ids) and found.flatten().tolist() == ids)
