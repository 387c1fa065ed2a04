"""Where the hooks are in a Hugging Face model that no family table describes, found by running it (decoder-only
models of any type, and encoders of their layout, as ModernBERT).

Most current families (Llama, Mistral, Qwen, Gemma, Phi, OLMo, GPT-NeoX, OPT, GPT-2 ...) keep their blocks in one
`nn.ModuleList` and compute attention through transformers' attention interface, but name and wire their blocks'
parts differently: a norm called `post_attention_layernorm` is the norm before the MLP in Llama and the norm of
attention's output in Gemma 2 and OLMo 2; GPT-NeoX and Phi run attention and the MLP side by side. Names cannot
tell these apart; values can. `discover` runs the model once on a few tokens, records what each block's parts
received and returned, and places a hook only where the values show its meaning:

- ln1: the norm whose input is the block's input and whose output is attention's input (of two alike, the nearest);
- hook_attn_out: attention's output, or that of the norm applied to it (sandwich norms);
- ln2: the norm whose output is the MLP's input; the block is parallel when that norm reads the block's input;
- hook_resid_mid: what ln2 (or, without one, the MLP) reads after attention's sum (sequential blocks only);
- hook_mlp_out: the MLP's output, or that of the norm applied to it; hook_resid_post: the block's output; the
  residual hooks are kept only where the probe's values add up as their names say (resid_mid = resid_pre + attn_out,
  resid_post = resid_mid + mlp_out, or resid_pre + attn_out + mlp_out in parallel blocks), so a block that adds a
  scaled output or normalises the sum (a BERT-style layout no table describes) offers no hook that means another
  thing (its output, normalised, is still the next block's hook_resid_pre);
- inside the MLP: mlp.hook_post is what its last projection reads, mlp.hook_pre what its activation reads, and
  mlp.hook_pre_linear the other projection of a gated MLP (the up projection);
- inside attention: the per-head values its attention function reports (model/hf/heads.py); where the queries
  it reports are not its `q_proj`'s output (rotated, or normalised), hook_q/hook_k are the projections' outputs
  and hook_rot_q/hook_rot_k what attention read; a fused projection is split in the layout that gives back, at
  position 0 (which no rotation moves), what attention read; each layer's sliding window is what its attention
  function received;
- per stack: hook_embed (the token embeddings, x the model's scale where it scales them), hook_pos_embed (a learned
  position table), ln_final and hook_resid_final (the norm read after the last block).

A hook must be placed alike in every block, or it is not placed; the hooks a decoder has that could not be placed
are listed (`Family.unplaced`), and the model card says so. A model whose attention reports nothing (it computes
attention in its own code: BLOOM, for one) cannot be shown, and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.heads import ProjectionHeads
from attention_atlas.model.hf.probe import Call, Probe, probe_run
from attention_atlas.model.hf.taps import (
    LAYER_NORM,
    RMS_NORM,
    Family,
    FusedHeads,
    NormValue,
    OneRun,
    Reader,
    TapMaker,
    TapTable,
    UpHalf,
    attention_hooks,
    batched_output,
    first_input,
    first_output,
    norm_hooks,
    output,
)

Placed = dict[str, tuple[str, Reader | TapMaker]]  # hook name -> (path relative to the block, reader)
LAYER_ORDER = (  # what a decoder block may offer, in the order of its computation
    "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized", "attn.hook_q", "attn.hook_k", "attn.hook_v",
    "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z",
    "hook_attn_out", "hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre",
    "mlp.hook_pre_linear", "mlp.hook_post", "hook_mlp_out", "hook_resid_post",
)
STACK_ORDER = ("hook_embed", "hook_pos_embed", "ln_final.hook_scale", "ln_final.hook_normalized", "hook_resid_final")

_rounding: ContextVar[float] = ContextVar("rounding", default=1e-4)  # `_same`'s tolerance while a model is discovered


def discover(model: nn.Module, kind: str = "decoder") -> Family:
    """The Family of a decoder-only model (or, `kind` "encoder", an encoder of the same layout: ModernBERT), its hooks
    found by a probe pass (see the module's docstring). ValueError where no block list is found, or attention reports
    nothing."""
    stack = "encoder" if kind == "encoder" else "decoder"
    base = model.base_model
    path_of = {module: path for path, module in base.named_modules()}
    layers_path, layers = _block_list(model)
    probe = probe_run(model, base, layers, kind)
    rotary = _has_rotary(base)
    token = _rounding.set(rounding_of(model))
    try:
        tables = [_block_table(block, probe, rotary) for block in layers]
    finally:
        _rounding.reset(token)
    if not all(any(name.startswith("attn.") for name in table) for table in tables):
        raise UserError(f"{type(model).__name__} computes attention in its own code, not through transformers' "
                         "attention interface, so its attention cannot be read here yet.")
    layer_taps = {name: (f"{layers_path}.{{i}}{'.' + tables[0][name][0] if tables[0][name][0] else ''}",
                         tables[0][name][1])
                  for name in LAYER_ORDER if name in tables[0] and all(t.get(name) == tables[0][name] for t in tables)}
    found = _stack_table(model, base, layers, probe, path_of)
    stack_taps = {name: found[name] for name in STACK_ORDER if name in found}
    rotary = rotary or "attn.hook_rot_q" in layer_taps
    parallel = _parallel(tables[0])
    unplaced = tuple(name for name in LAYER_ORDER if name not in layer_taps and _expected(name, rotary, parallel)) + \
        tuple(name for name in STACK_ORDER if name not in stack_taps and name != "hook_pos_embed")
    norm_kind = _norm_kind(layers[0])
    windows = tuple(_window(block, probe) for block in layers)
    return Family(
        name=type(base).__name__.removesuffix("Model"),
        kind=kind,
        positional="rotary" if rotary else "learned absolute" if "hook_pos_embed" in stack_taps else "none found",
        norm=_norm_layout(tables[0], parallel, norm_kind),
        stack_taps={stack: stack_taps},
        layer_taps={stack: layer_taps},
        layer_counts={stack: _count(len(layers))},
        final_norm=stack_taps["ln_final.hook_scale"][0] if "ln_final.hook_scale" in stack_taps else None,
        unplaced=unplaced,
        windows=windows if any(windows) else (),
    )


def _window(block: nn.Module, probe: Probe) -> int:
    """The sliding window the block's attention read (0: none), as its attention function received it."""
    return next((probe.windows[m] for m in block.modules() if m in probe.windows), 0)


def _count(n: int) -> Callable[[Any], int]:
    """A family's layer count: the blocks found, whatever the config says."""
    return lambda config: n


def _block_list(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """(path under base_model, the list) of the model's blocks: the largest ModuleList of num_hidden_layers."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    count = getattr(config, "num_hidden_layers", None)
    lists = [(path, m) for path, m in model.base_model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) == count and len(m) > 0]
    if not lists:
        raise UserError(f"{type(model).__name__}: no list of {count} blocks found, so its layers cannot be read.")
    return max(lists, key=lambda item: sum(p.numel() for p in item[1].parameters()))


def _same(a: torch.Tensor | None, b: torch.Tensor | None, rtol: float | None = None) -> bool:
    """Whether two values of the probe are one, up to the rounding of the model's dtype (`_rounding`: a bfloat16
    model's sums, redone here in float32, differ from its own in the third digit), or up to `rtol`."""
    if a is None or b is None or a.shape != b.shape:
        return False
    rtol = _rounding.get() if rtol is None else rtol
    return bool(torch.allclose(a, b, rtol=rtol, atol=rtol / 10 * max(1.0, float(b.abs().max()))))


def rounding_of(model: nn.Module) -> float:
    """The relative tolerance of `_same` for a model's values: 1e-4, or 4 steps of its dtype's rounding if coarser
    (bfloat16: 0.03; float16: 0.004)."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return max(1e-4, 4 * torch.finfo(dtype).eps)


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower() and not isinstance(module, nn.Identity)


def _norm_value(module: nn.Module) -> NormValue:
    return RMS_NORM if "rms" in type(module).__name__.lower() else LAYER_NORM


def _block_table(block: nn.Module, probe: Probe, rotary: bool) -> Placed:
    """The hooks placed in one block: name -> (path relative to the block, reader)."""
    table: Placed = {}
    own = probe.calls.get(block)
    if own is None:
        return table
    parts = [(name, m) for name, m in block.named_children() if m in probe.calls]
    parts.sort(key=lambda item: probe.calls[item[1]].order)
    attention = next(((name, m) for name, m in parts if any(q is m or q in set(m.modules())
                                                              for q in probe.queries)), None)
    table["hook_resid_pre"] = ("", first_input)
    table["hook_resid_post"] = ("", first_output)
    if attention is None:
        return table
    norms = [(name, m) for name, m in parts if _is_norm(m) or (isinstance(m, nn.Identity) and "norm" in name.lower())]
    # (an identity in a norm's place, as ModernBERT's first attn_norm, is a norm that divides by 1)
    others = [(name, m) for name, m in parts if not _is_norm(m) and m is not attention[1]
              and any(True for _ in m.parameters())]
    x, attn_call = own.input, probe.calls[attention[1]]

    def before(order: int, test: Callable[[Call], bool]) -> tuple[str, nn.Module] | None:
        """The last norm called before `order` that passes `test` (two norms of one input, as freshly initialised
        ones are, are told apart by where they are called)."""
        return next((p for p in reversed(norms) if probe.calls[p[1]].order < order and test(probe.calls[p[1]])), None)

    def after(order: int, test: Callable[[Call], bool]) -> tuple[str, nn.Module] | None:
        """The first norm called after `order` that passes `test`."""
        return next((p for p in norms if probe.calls[p[1]].order > order and test(probe.calls[p[1]])), None)

    ln1 = before(attn_call.order, lambda c: _same(c.input, x) and _same(c.output, attn_call.input))
    if ln1 is not None:
        table |= dict(norm_hooks("ln1", ln1[0], _norm_value(ln1[1])))
    table |= _attention_table(attention, probe, rotary)
    post_attention = after(attn_call.order, lambda c: _same(c.input, attn_call.output))
    table["hook_attn_out"] = (post_attention[0], output) if post_attention else (attention[0], first_output)
    attn_out = probe.calls[post_attention[1]].output if post_attention else attn_call.output
    mlp = _find_mlp(block, others, probe)
    if mlp is None:  # attention alone: its output must be what the block adds
        return table if _adds_up(own.output, x, attn_out) else _without(table, "hook_attn_out", "hook_resid_post")
    ln2 = before(mlp.order, lambda c: _same(c.output, mlp.input))
    mlp_reads = probe.calls[ln2[1]].input if ln2 else mlp.input
    if ln2 is not None and ln2 != ln1:
        table |= dict(norm_hooks("ln2", ln2[0], _norm_value(ln2[1])))
    if not _same(mlp_reads, x, rtol=1e-4):  # sequential: the MLP's side reads the sum after attention (a parallel
        # block's reads the block's input itself; in bfloat16 a small attention output is within rounding of it)
        table["hook_resid_mid"] = (ln2[0], first_input) if ln2 else mlp.reads
    post_mlp = after(mlp.order, lambda c: _same(c.input, mlp.output))
    table["hook_mlp_out"] = (post_mlp[0], output) if post_mlp else mlp.made
    table |= _mlp_table(mlp, probe)
    mlp_out = probe.calls[post_mlp[1]].output if post_mlp else mlp.output
    if "hook_resid_mid" in table and not _adds_up(mlp_reads, x, attn_out):
        table = _without(table, "hook_attn_out", "hook_resid_mid")  # the sum is not resid_pre + attn_out
    sums = (mlp_reads, mlp_out) if "hook_resid_mid" in table else (x, attn_out, mlp_out)
    if not _adds_up(own.output, *sums):  # the block adds something else (a scaled output, a post-norm)
        table = _without(table, "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
    if mlp.input is not None and x is not None and mlp.input.dim() < x.dim():  # flattened positions (OPT)
        table = {name: (path, OneRun(read)) if _is_mlp_side(name) else (path, read)
                 for name, (path, read) in table.items()}
    return table


def _adds_up(total: torch.Tensor | None, *parts: torch.Tensor | None) -> bool:
    """Whether `total` is the sum of `parts` (each as (positions, d_model), wherever the model flattened them)."""
    if total is None or any(p is None or p.numel() != total.numel() for p in parts):
        return False
    return _same(total.reshape(-1, total.shape[-1]), sum(p.reshape(total.shape) for p in parts).reshape(
        -1, total.shape[-1]))


def _without(table: Placed, *names: str) -> Placed:
    """The table less the residual hooks whose sums the probe could not show (they would mean something else)."""
    return {name: place for name, place in table.items() if name not in names}


def _is_mlp_side(name: str) -> bool:
    return name.startswith(("ln2.", "mlp.")) or name in ("hook_resid_mid", "hook_mlp_out")


@dataclass
class MLP:
    """A block's MLP: a part of its own (`path`), or its projections among the block's parts (OPT; `path` "")."""

    path: str
    order: int  # when it was called (its first projection, where it has no module of its own)
    parts: list[tuple[str, nn.Module]]  # what it calls, in the order called
    input: torch.Tensor | None
    output: torch.Tensor | None
    reads: tuple[str, Reader]  # where its input is read
    made: tuple[str, Reader]  # where its output is read


def _find_mlp(block: nn.Module, others: list[tuple[str, nn.Module]], probe: Probe) -> MLP | None:
    """The block's MLP: its one part with weights besides attention and the norms, or else its projections."""
    if len(others) == 1:
        name, module = others[0]
        call = probe.calls[module]
        parts = sorted(((n, m) for n, m in module.named_children() if m in probe.calls),
                       key=lambda item: probe.calls[item[1]].order)
        return MLP(name, call.order, parts, call.input, call.output, (name, first_input), (name, first_output))
    if len(others) >= 2 and all(_is_projection(m) for _, m in others):
        parts = sorted(((n, m) for n, m in block.named_children() if m in probe.calls
                        and (_is_projection(m) or not any(True for _ in m.parameters()))),
                       key=lambda item: probe.calls[item[1]].order)
        first, last = probe.calls[others[0][1]], probe.calls[others[-1][1]]
        return MLP("", first.order, parts, first.input, last.output, (others[0][0], first_input),
                   (others[-1][0], output))
    return None


def _is_projection(module: nn.Module) -> bool:
    """A linear map (nn.Linear, GPT-2's Conv1D): a 2D weight."""
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 2 and not isinstance(module, nn.Embedding)


def _attention_table(attention: tuple[str, nn.Module], probe: Probe, rotary: bool
                     ) -> Placed:
    """The per-head hooks of the attention part (or of its part that reports). rotary: the model rotates queries
    and keys, which is all that tells where projections are fused."""
    name, module = attention
    reporting = next(m for m in module.modules() if m in probe.queries)
    path = name + "".join(f".{n}" for n, m in module.named_modules() if m is reporting and n)
    separate = all(isinstance(getattr(reporting, p, None), nn.Linear) for p in ("q_proj", "k_proj"))
    changed = _changed(reporting, probe) if separate else "same"
    rotated = rotary and (changed == "other" if separate else True)
    table = dict(attention_hooks("attn", path, rotary=rotated, projected=changed != "same"))
    if rotated and not separate:  # one fused projection: the queries and keys before the rotation are read from it
        fused = _fused_heads(reporting, probe)
        table = {k: v for k, v in table.items() if k not in ("attn.hook_q", "attn.hook_k")}
        if fused is not None:
            table |= {"attn.hook_q": (path, fused[0]), "attn.hook_k": (path, fused[1])}
    return table


def _fused_heads(module: nn.Module, probe: Probe) -> tuple[FusedHeads, FusedHeads] | None:
    """The readers of the queries and keys from a fused projection, whichever layout it has (Phi-3: every query, then
    every key, then every value; GPT-NeoX: each head's query, key and value side by side): the one whose parts equal
    at position 0, which the rotation leaves as it is, what attention read."""
    query, key = probe.queries[module], probe.keys.get(module)  # (heads or kv_heads, len, d_head)
    for name, child in module.named_children():
        call = probe.calls.get(child)
        if key is None or call is None or not _is_projection(child) or call.output is None:
            continue
        for layout in ("blocks", "per head"):
            readers = tuple(FusedHeads(name, part, layout, len(query), len(key), query.shape[-1]) for part in (0, 1))
            try:
                made = [reader.split(call.output)[0, :, 0] for reader in readers]  # (heads, d_head) at position 0
            except RuntimeError:  # the layout does not fit the projection's width
                continue
            if _same(made[0], query[:, 0]) and _same(made[1], key[:, 0]):
                return readers
    return None


def _changed(module: nn.Module, probe: Probe) -> str:
    """How the queries attention read differ from what its `q_proj` made: "same", "scaled" (OPT scales them when
    projecting, and passes a scale of 1), or "other" (rotated, or normalised)."""
    reported = probe.queries[module]  # (heads, len, d_head)
    projected = ProjectionHeads("q_proj").tap(module).read((), {}, probe.calls[module.q_proj].output)[0]
    return "same" if _same(reported, projected) else "scaled" if _scaled_copy(reported, projected) else "other"


def _mlp_table(mlp: MLP, probe: Probe) -> Placed:
    """mlp.hook_pre, hook_pre_linear and hook_post, where the MLP's parts show them."""
    prefix = f"{mlp.path}." if mlp.path else ""
    linears = [(n, m) for n, m in mlp.parts if _is_projection(m)]
    activations = [(n, m) for n, m in mlp.parts if not any(True for _ in m.parameters())
                   and not isinstance(m, nn.Dropout)]
    table: Placed = {}
    if len(linears) < 2:
        return table  # a mixture of experts, or a layout not seen before
    table["mlp.hook_post"] = (f"{prefix}{linears[-1][0]}", first_input)
    if len(activations) == 1:
        act_name, act = activations[0]
        table["mlp.hook_pre"] = (f"{prefix}{act_name}", first_input)
        if len(linears) == 3:
            up = [n for n, m in linears[:2] if not _same(probe.calls[m].output, probe.calls[act].input)]
            if len(up) == 1:
                table["mlp.hook_pre_linear"] = (f"{prefix}{up[0]}", output)
        fused = probe.calls[linears[0][1]].output  # a fused gate and up projection: the gate is its first half
        if len(linears) == 2 and fused is not None and _same(fused.chunk(2, -1)[0], probe.calls[act].input):
            table["mlp.hook_pre_linear"] = (f"{prefix}{linears[0][0]}", UpHalf())
    elif len(linears) == 2:
        table["mlp.hook_pre"] = (f"{prefix}{linears[0][0]}", output)
    return table


def _stack_table(model: nn.Module, base: nn.Module, layers: nn.ModuleList, probe: Probe,
                 path_of: dict[nn.Module, str]) -> TapTable:
    """hook_embed, hook_pos_embed, ln_final.* and hook_resid_final."""
    table: TapTable = {}
    embedding = model.get_input_embeddings()
    first, last = probe.calls[layers[0]], probe.calls[layers[-1]]
    embedded = probe.calls[embedding].output
    positions = next((m for m in base.modules() if isinstance(m, nn.Embedding) and m is not embedding
                      and m in probe.calls and probe.calls[m].order < first.order), None)
    if positions is not None:
        table["hook_pos_embed"] = (path_of[positions], batched_output)
        table["hook_embed"] = (path_of[embedding], output)
    elif _scaled_copy(first.input, embedded):  # the embeddings x the model's scale (Gemma: sqrt(d_model)) go in
        table["hook_embed"] = (path_of[layers[0]], first_input)
    else:
        table["hook_embed"] = (path_of[embedding], output)
    final = next((m for m in base.modules() if _is_norm(m) and m in probe.calls
                  and probe.calls[m].order > last.order and _same(probe.calls[m].input, last.output)), None)
    if final is not None:
        table |= norm_hooks("ln_final", path_of[final], _norm_value(final))
        table["hook_resid_final"] = (path_of[final], output)
    return table


def _scaled_copy(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether a = c x b for one number c."""
    if a is None or b is None or a.shape != b.shape:
        return False
    c = float((a * b).sum() / (b * b).sum().clamp_min(1e-30))
    return _same(a, c * b)


def _expected(name: str, rotary: bool, parallel: bool) -> bool:
    """Whether a decoder block of this kind has the hook `name` (a gated MLP's up projection is not expected)."""
    return not ((name.startswith("attn.hook_rot_") and not rotary) or (name == "hook_resid_mid" and parallel)
                or name == "mlp.hook_pre_linear")


def _has_rotary(base: nn.Module) -> bool:
    """Whether the model rotates queries and keys: a rotary embedding among its modules."""
    return any("rotary" in type(m).__name__.lower() for m in base.modules())


def _parallel(table: Placed) -> bool:
    """A block whose MLP reads the block's input, not attention's sum (GPT-NeoX, GPT-J, Phi, Cohere)."""
    return "hook_mlp_out" in table and "hook_resid_mid" not in table


def _norm_kind(block: nn.Module) -> str:
    norms = [m for m in block.children() if _is_norm(m)]
    return "RMSNorm" if norms and all(_norm_value(m).rms for m in norms) else "LayerNorm"


def _norm_layout(table: Placed, parallel: bool, kind: str) -> str:
    """How the block's norms are placed, in words."""
    sandwich = table.get("hook_attn_out", ("", output))[1] is output  # a norm's output is what attention adds
    if parallel:
        return f"pre-norm, attention and MLP in parallel ({kind})"
    if sandwich and "ln1.hook_scale" in table:
        return f"pre- and post-norm around each sublayer ({kind})"
    if sandwich:  # not "post-norm": the stream itself is never normalised, as in BERT's
        return f"a norm on each sublayer's output, none before ({kind})"
    return f"pre-norm ({kind})"
