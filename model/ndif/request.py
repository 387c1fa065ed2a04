"""One run as one nnsight request: sent to NDIF, or simulated here (nnsight's own serialisation round trip).

The request carries the token ids, the plan (plain data, model/ndif/wire.py) and model/ndif/remote.py and
remote_summary.py, shipped by their source (`nnsight.register`): the body of the `with` blocks below is what NDIF runs.
What comes back is the saved values: the plan's tensors (or a layer's summary sums), the logits the run reads, the
generated ids.

Simulated, the request takes nnsight's serialisation round trip here, strictly (model/ndif/backends.py), and its
result goes through torch.save and back, as NDIF's does; sent, NDIF's status stream is followed. Either way the bytes
are counted (`Transfer`), and what NDIF or the network refuses becomes a sentence.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.ndif import remote, remote_summary
from attention_atlas.model.ndif.backends import Simulated, read_result, watched
from attention_atlas.model.ndif.status import api_key, tell
from attention_atlas.model.ndif.transfer import Transfer

TIMEOUT_S = 600.0  # the longest a request is waited for, queue included


@dataclass(frozen=True)
class Ask:
    """What one request asks of the model: read `plan` (remote.collect) at the first pass over `ids`, the logits
    from position `first` on, and `generate` greedy tokens after it (0: one forward pass)."""

    ids: list[int]
    plan: list[tuple[str, str]]
    edits: dict[str, tuple[tuple[tuple[int, int], ...], str]]
    first: int
    generate: int
    pad_id: int | None = None  # what generate pads with
    rows: int = 1  # the ids read this many times in one batch, each row with its own edits (no generation)
    layout: dict[str, Any] | None = None  # the site summary's layout, for "summary" steps (remote_summary.Layout)
    passes: list[str] | None = None  # attention module paths: `generate` greedy tokens, reading at each pass the
    # ids it read, the last query's attention row in each of these modules and the logits (remote.step_rows), no plan
    patches: remote.Patches | None = None  # values put in place in the pass, each row its own (remote.apply_patches)
    gradient: tuple[list[remote.Site], int, Any] | None = None  # (sites, position, metric): the gradient of
    # metric(the logits after the position) with respect to each site's value, in one forward and backward pass


@dataclass(frozen=True)
class Answer:
    found: list[Any]  # the plan's reads; a gradient's, one a site
    logits: torch.Tensor | None  # (rows, len(ids) - first, vocab); None for `passes` and a gradient
    generated: list[int]  # the ids after `ids`, [] without generation
    transfer: Transfer
    passes: list[tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]]  # `Ask.passes`' reads, a pass each


def send(model: Any, ask: Ask, simulate: bool, key: str | None, timeout_s: float = TIMEOUT_S) -> Answer:
    """Run `ask` on `model` (an nnsight TransformersModel: dispatched here to simulate, on the meta device to send);
    UserError with a sentence for what NDIF or the network refused."""
    import nnsight

    nnsight.register(remote)
    nnsight.register(remote_summary)
    backend = Simulated(model) if simulate else _watched(model, key, timeout_s)
    try:
        with warnings.catch_warnings():  # the loop over an ablated generation's steps ends where generation does
            warnings.filterwarnings("ignore", message=".*was never reached.*")
            saved = _run(model, ask, backend)
    except UserError:
        raise
    except Exception as error:
        readable = _readable(error)
        if readable is error:  # not NDIF's or the network's (a bug; a run nobody waits for any more)
            raise
        raise readable from error
    if simulate:
        saved, backend.received = _round_trip(saved)
    tell("NDIF: completed")
    transfer = Transfer(backend.sent, backend.received, simulate)
    return Answer(list(saved["found"]), saved["logits"], _generated(saved, ask), transfer, list(saved["passes"]))


def _run(model: Any, ask: Ask, backend: Any) -> dict[str, Any]:
    """The request itself: the body of each `with` block is what NDIF runs. With ablated heads, generation re-reads
    the whole sequence at each step (an ablation by the mean reads every position), the heads ablated at each, and
    each step's token is read off its logits (the loop over the steps ends where generation does)."""
    import nnsight

    if ask.passes is not None:
        return _passes(model, ask, backend)
    if ask.gradient is not None:
        return _gradient(model, ask, backend)
    ids, plan, edits, layout = torch.tensor([ask.ids] * ask.rows), ask.plan, ask.edits, ask.layout
    count = len(ask.ids) - ask.first
    generated = steps = None
    if ask.generate:
        with model.generate(ids, max_new_tokens=ask.generate, do_sample=False, use_cache=not edits,
                            pad_token_id=ask.pad_id, backend=backend) as tracer:
            found = nnsight.save(remote.collect(model, plan, edits, layout))
            logits = nnsight.save(remote.last_logits(model, count))
            if edits:
                steps = nnsight.save([])
                for _ in tracer.iter[1:]:
                    remote.edit_only(model, edits)
                    steps.append(remote.chosen(model))
            else:
                generated = nnsight.save(tracer.result)
    else:
        patches = ask.patches or []
        with model.trace(ids, backend=backend):
            found = nnsight.save(remote.collect(model, plan, edits, layout))
            remote.apply_patches(model, patches)
            logits = nnsight.save(remote.last_logits(model, count))
    return {"found": found, "logits": logits, "generated": generated, "steps": steps, "passes": []}


def _passes(model: Any, ask: Ask, backend: Any) -> dict[str, Any]:
    """A greedy generation of `ask.generate` tokens read pass by pass (`Ask.passes`): the body of the `with` block is
    what NDIF runs; the loop over the passes ends where generation does (an end token)."""
    import nnsight

    ids, paths = torch.tensor([ask.ids]), ask.passes
    with model.generate(ids, max_new_tokens=ask.generate, do_sample=False, pad_token_id=ask.pad_id,
                        backend=backend) as tracer:
        passes = nnsight.save([])
        for _ in tracer.iter[:]:
            passes.append(remote.step_rows(model, paths))
    return {"found": [], "logits": None, "generated": None, "steps": None, "passes": passes}


def _gradient(model: Any, ask: Ask, backend: Any) -> dict[str, Any]:
    """The gradient of `ask.gradient`'s metric with respect to each of its sites' values, row 0 of each (`found`):
    the body of the `with` blocks is what NDIF runs (the backward pass's inside the forward's: nnsight reads each
    block's source, and ships this one's); gradients are read in the backward pass's order."""
    import nnsight

    if ask.gradient is None:
        raise ValueError("a gradient request carries its sites, position and metric")
    sites, position, metric = ask.gradient
    with model.trace(torch.tensor([ask.ids]), backend=backend):
        remote.prepare_sites(model, sites)
        values = [remote.value_at(model, path, part) for path, part in sites]
        score = metric(model.output.logits[0, position].float())
        found = nnsight.save([])
        with score.backward():
            for value in reversed(values):
                found.append(remote.host(value.grad[0]))
    return {"found": found[::-1], "logits": None, "generated": None, "steps": None, "passes": []}


def _generated(saved: dict[str, Any], ask: Ask) -> list[int]:
    """The ids a generation added after `ask.ids`: from generate's result, or the first token and each later step's."""
    if not ask.generate or ask.passes is not None or ask.gradient is not None:
        return []
    if saved["generated"] is not None:
        return saved["generated"][0, len(ask.ids):].tolist()
    return [int(saved["logits"][0, -1].argmax()), *map(int, saved["steps"])]


def current_key() -> str | None:
    """The key a request is sent with: this run's (model/ndif/status.py `using_key`), else NDIF_API_KEY's, else the
    one nnsight keeps in its own configuration (`nnsight.login`)."""
    from nnsight import CONFIG

    return api_key() or CONFIG.API.APIKEY or None


NO_KEY = ("NDIF needs an API key: set NDIF_API_KEY, or type the key in the sidebar (Device → NDIF). A key comes "
          "with an account at https://login.ndif.us.")


def _watched(model: Any, key: str | None, timeout_s: float) -> Any:
    """The backend that sends the request; UserError without a key, or where NDIF's name of the model (its Hugging
    Face Hub id, looked up on the Hub) cannot be had."""
    if not key:
        raise UserError(NO_KEY)
    try:
        model_key = model.to_model_key()
    except Exception as error:
        raise UserError(f"NDIF names a model by its Hugging Face Hub id, looked up on the Hub, and that failed here "
                        f"({_first_line(error)}): check the id and the network.") from error
    return watched(model_key, key, timeout_s)


def _readable(error: Exception) -> Exception:
    """What NDIF or the network refused, as a sentence (UserError); anything else as it is (a bug)."""
    import httpx
    import websocket
    from nnsight.intervention.backends.remote import RemoteError

    detail = _first_line(error)
    if isinstance(error, RemoteError):
        said = detail.lower()
        if any(word in said for word in ("api key", "api-key", "unauthorized", "401", "403")):
            return UserError(f"NDIF did not accept the API key ({detail}): check NDIF_API_KEY, or the key typed in "
                             "the sidebar.")
        if any(word in said for word in ("429", "rate limit", "too many", "quota", "exceed", "limit")):
            return UserError(f"NDIF refused the run: it is over one of its limits ({detail}). Wait and try again, or "
                             "ask for less (a shorter text, fewer layers).")
        if any(word in said for word in ("503", "unavailable", "not running", "deploying")):
            return UserError(f"NDIF is not taking this run now ({detail}): try again in a few minutes.")
        return UserError(f"NDIF refused the run: {detail}")
    if isinstance(error, OSError | httpx.TransportError | websocket.WebSocketException):
        return UserError(f"NDIF cannot be reached from this server ({detail}): check the network, or simulate the "
                         "run here (simulate=True, or Device → NDIF, simulated).")
    return error


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def _round_trip(saved: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """`saved` as NDIF's server writes it (torch.save, pickle protocol 4) and as this client reads it back, and its
    size."""
    buffer = io.BytesIO()
    torch.save(saved, buffer, pickle_protocol=4)
    content = buffer.getvalue()
    return read_result(content), len(content)
