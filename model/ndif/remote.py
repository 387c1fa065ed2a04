"""The code that runs on NDIF, inside one nnsight request: it reads what a run of the app needs off the hosted
model's modules and hands back plain tensors, never anything of this project.

nnsight ships this module by its source (`nnsight.register`, model/ndif/request.py), and model/ndif/remote_summary.py
with it: NDIF's servers have torch and nnsight, not attention_atlas, so these files import torch and each other alone
and reach nothing else of the project (a contract test holds them to that). The plan it follows is plain data made
here (model/ndif/wire.py): a list of (module path, part) in the order the forward pass reaches them, nnsight's rule (a
location the model has passed cannot be read any more). A part is
- "input": the module's first input (the hidden states going in);
- "output": its output, a tensor or a tuple whose tensors come back (anything else as None);
- "attention" (or "attention+values"): what the module's attention function was handed (`attention_interface(self,
  query, key, value, mask, ...)` in transformers' code): the queries and keys after any rotation (and the values),
  and the call's numbers (scaling, sliding window, soft-cap);
- "summary": the layer's attention summarised there from those queries and keys (model/ndif/remote_summary.py, by
  the site's layout): its thumbnails', statistics' and rollout's sums, not the queries and keys;
- "edit": nothing read.
At an attention step the heads chosen are ablated in the attention function's output (before the output projection).
Each tensor is copied to the host as it comes (a copy of its own: a view would carry its whole storage back).
"""

from __future__ import annotations

from typing import Any

import torch

from attention_atlas.model.ndif import remote_summary

Step = tuple[str, str]  # (module path, "input" | "output" | "attention" | "attention+values" | "summary" | "edit")
Site = tuple[str, str]  # where a hook's value is, to patch it or read its gradient: (module path, "input" | "output"
# | "z": the module's first input, its output tensor (or the first of a tuple), its attention function's output)
Patches = list[tuple[str, str, list[tuple[int, int | None, int | None, torch.Tensor]]]]  # (module path, part,
# [(row, position or None: every one, head (z) or None, the value put there)]), in the order the forward reaches them
Edits = dict[str, tuple[tuple[tuple[int, int], ...], str]]  # attention module path -> ((row, head) ..., "zero" |
# "mean"), row -1: every row of the batch


def module_at(model: Any, path: str) -> Any:
    """The envoy of the module at `path` ("model.layers.3.self_attn")."""
    envoy = model
    for part in path.split("."):
        envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
    return envoy


def host(value: Any) -> Any:
    """A tensor as a host copy of its own; a tuple or list of values as a tuple of such (None for what is not one)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, tuple | list):
        return tuple(value_.detach().to("cpu", copy=True) if isinstance(value_, torch.Tensor) else None
                     for value_ in value)
    return None


def attention_call(envoy: Any) -> Any:
    """The call of the attention function inside an attention module's forward: the last operation nnsight names
    `attention_interface_<n>` (the name is bound once, `attention_interface_0`, then called)."""
    names = [name for name in envoy.source.names if name.startswith("attention_interface_")]
    return envoy.source.node(names[-1])


def numbers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The attention call's keyword numbers (scaling, sliding_window, softcap ...) and its sink logits (s_aux)."""
    kept = {name: value for name, value in kwargs.items() if isinstance(value, bool | int | float)}
    if isinstance(kwargs.get("s_aux"), torch.Tensor):
        kept["s_aux"] = host(kwargs["s_aux"])
    return kept


def ablate(output: torch.Tensor, pairs: tuple[tuple[int, int], ...], mode: str) -> None:
    """In place: attention's output (batch, q_len, heads, d_head), each (row, head) of `pairs` (row -1: every row) set
    to 0 or to its mean over the positions (model/core/capture/ablation.py's meaning)."""
    for row, head in pairs:
        rows = slice(None) if row == -1 else row
        if mode == "zero":
            output[rows, :, head] = 0
        else:
            output[rows, :, head] = output[rows, :, head].mean(dim=-2, keepdim=True)


def collect(model: Any, plan: list[Step], edits: Edits, layout: remote_summary.Layout | None = None) -> list[Any]:
    """Walk `plan` through one forward pass of `model` (an nnsight envoy), returning what each step read, in order
    (None for an edit); edits: the heads to ablate, by attention module (each one a step of the plan); layout: the
    summary's, for "summary" steps."""
    for path, part in plan:  # each attention function's call made readable before the pass reaches its module
        if part not in ("input", "output"):
            module_at(model, path).source  # noqa: B018 (nnsight instruments the forward when this is first read)
    found: list[Any] = []
    for path, part in plan:
        envoy = module_at(model, path)
        if part == "input":
            found.append(host(envoy.input))
        elif part == "output":
            found.append(host(envoy.output))
        else:
            call = attention_call(envoy)
            if part == "edit":
                found.append(None)
            elif part == "summary":
                args, kwargs = call.inputs
                found.append(remote_summary.reduce_layer(args[1], args[2], kwargs, layout))
            else:
                args, kwargs = call.inputs
                values = host(args[3]) if part == "attention+values" else None
                found.append((host(args[1]), host(args[2]), values, numbers(kwargs)))
            if path in edits:
                ablate(call.output[0], *edits[path])
    return found


def edit_only(model: Any, edits: Edits) -> None:
    """Ablate the heads of `edits` (attention modules in the order the forward pass reaches them) in one forward pass:
    a later step of a generation."""
    for path in edits:
        ablate(attention_call(module_at(model, path)).output[0], *edits[path])


def last_logits(model: Any, count: int) -> torch.Tensor:
    """The logits (batch, count, vocab) of the last `count` positions: those the run reads (generate computes the
    last position's only; 0: none)."""
    logits = model.output.logits
    return host(logits[:, logits.shape[1] - count :])


def step_rows(model: Any, paths: list[str]) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """At one pass of a generation: the ids it read (the prompt, then the token chosen at the pass before), the last
    query's attention row (heads, keys) at each attention module of `paths` (in the forward pass's order), and the
    last position's logits (vocab,)."""
    args, kwargs = model.inputs
    ids = host(kwargs["input_ids"] if "input_ids" in kwargs else args[0])[0]
    rows = []
    for path in paths:
        call_args, call_kwargs = attention_call(module_at(model, path)).inputs
        rows.append(host(remote_summary.last_row(call_args[1], call_args[2], call_kwargs)))
    return ids, rows, host(model.output.logits[0, -1])


def value_at(model: Any, path: str, part: str) -> torch.Tensor:
    """The tensor at a site (`Site`): (batch, len, d), or a z's (batch, len, heads, d_head)."""
    envoy = module_at(model, path)
    if part == "input":
        return envoy.input
    if part == "z":
        return attention_call(envoy).output[0]
    out = envoy.output
    return out if isinstance(out, torch.Tensor) else out[0]


def prepare_sites(model: Any, sites: list[Site]) -> None:
    """Make each z site's attention call readable before the pass reaches its module."""
    for path, part in sites:
        if part == "z":
            module_at(model, path).source  # noqa: B018 (nnsight instruments the forward when this is first read)


def apply_patches(model: Any, patches: Patches) -> None:
    """Put each value of `patches` in place, in one forward pass (model/core/capture/patching.py's meaning: a value at
    a position, or at every position; a z's at its head)."""
    prepare_sites(model, [(path, part) for path, part, _ in patches])
    for path, part, puts in patches:
        target = value_at(model, path, part)
        for row, position, head, value in puts:
            where = (row, slice(None) if position is None else position, *(() if head is None else (head,)))
            target[where] = value.to(device=target.device, dtype=target.dtype)


def chosen(model: Any) -> int:
    """The greedy choice of this pass: the last position's likeliest token."""
    return int(model.output.logits[0, -1].argmax())
