"""The hooks of one block, placed where the probe's values show their meaning (see model/hf/discovery/__init__.py):
name -> (path relative to the block, reader)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from attention_atlas.model.hf.discovery.attention import attention_table
from attention_atlas.model.hf.discovery.mlp import find_mlp, mlp_table
from attention_atlas.model.hf.discovery.norms import is_norm, norm_value
from attention_atlas.model.hf.discovery.values import adds_up, same, scaled_copy
from attention_atlas.model.hf.probe import Call, Probe
from attention_atlas.model.hf.taps import Copied, OneRun, TapTable, first_input, first_output, norm_hooks, output

Part = tuple[str, nn.Module]  # (name in the block, module)
SUMS = ("hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")  # the hooks the residual sums tie


@dataclass
class Parts:
    """A block's parts that the probe saw called, in the order called."""

    call: Call  # the block's own
    attention: Part
    norms: list[Part]  # norms, and an identity in a norm's place (ModernBERT's first attn_norm: divides by 1)
    others: list[Part]  # parts with weights besides attention and the norms (the MLP, or its projections)
    probe: Probe

    def norm_before(self, order: int, test: Callable[[Call], bool]) -> Part | None:
        """The last norm called before `order` that passes `test` (two norms of one input, as freshly initialised
        ones are, are told apart by where they are called)."""
        calls = self.probe.calls
        return next((p for p in reversed(self.norms) if calls[p[1]].order < order and test(calls[p[1]])), None)

    def norm_after(self, order: int, test: Callable[[Call], bool]) -> Part | None:
        """The first norm called after `order` that passes `test`."""
        calls = self.probe.calls
        return next((p for p in self.norms if calls[p[1]].order > order and test(calls[p[1]])), None)


def block_table(block: nn.Module, probe: Probe, rotary: bool) -> TapTable:
    """The hooks placed in one block (none of attention's where it has none that reports)."""
    table: TapTable = {"hook_resid_pre": ("", first_input), "hook_resid_post": ("", first_output)}
    parts = _parts(block, probe)
    if parts is None:
        return table
    x, attention = parts.call.input, probe.calls[parts.attention[1]]
    ln1 = parts.norm_before(attention.order, lambda c: same(c.input, x) and scaled_copy(attention.input, c.output))
    if ln1 is not None:
        table |= norm_hooks("ln1", ln1[0], norm_value(ln1[1]))
    table |= attention_table(parts.attention, probe, rotary)
    after_attention = parts.norm_after(attention.order, lambda c: same(c.input, attention.output))
    table["hook_attn_out"] = (after_attention[0], output) if after_attention else (parts.attention[0], first_output)
    attn_out = probe.calls[after_attention[1]].output if after_attention else attention.output
    sums = (x, attn_out)  # what the block's output must add up to
    mlp = find_mlp(block, parts.others, probe)
    if mlp is not None:
        ln2 = parts.norm_before(mlp.order, lambda c: same(c.output, mlp.input))
        mlp_reads = probe.calls[ln2[1]].input if ln2 else mlp.input
        if ln2 is not None and ln2 != ln1:
            table |= norm_hooks("ln2", ln2[0], norm_value(ln2[1]))
        if not same(mlp_reads, x, rtol=1e-4):  # sequential: the MLP's side reads the sum after attention (a parallel
            # block's reads the block's input itself; in bfloat16 a small attention output is within rounding of it)
            table["hook_resid_mid"] = (ln2[0], first_input) if ln2 else mlp.reads
        after_mlp = parts.norm_after(mlp.order, lambda c: same(c.input, mlp.output))
        table["hook_mlp_out"] = (after_mlp[0], output) if after_mlp else mlp.made
        table |= mlp_table(mlp, probe)
        mlp_out = probe.calls[after_mlp[1]].output if after_mlp else mlp.output
        if "hook_resid_mid" in table and not adds_up(mlp_reads, x, attn_out):
            table = _without(table, "hook_attn_out", "hook_resid_mid")  # the sum is not resid_pre + attn_out
        sums = (mlp_reads, mlp_out) if "hook_resid_mid" in table else (x, attn_out, mlp_out)
        if mlp.input is not None and x is not None and mlp.input.dim() < x.dim():  # flattened positions (OPT)
            table = {name: (path, OneRun(read)) if _is_mlp_side(name) else (path, read)
                     for name, (path, read) in table.items()}
    if not adds_up(parts.call.output, *sums):  # the block adds something else (a scaled output, a post-norm)
        table = _without(table, *SUMS)
    return _copied_where_changed(table, block, probe)


def _copied_where_changed(table: TapTable, block: nn.Module, probe: Probe) -> TapTable:
    """The table with the outputs that the model changes in place after their module returns them read as copies."""
    changed = {name for name, module in block.named_modules() if module in probe.calls
               and probe.calls[module].changed_later}
    return {name: (path, Copied(read) if path in changed and read in (output, first_output) else read)
            for name, (path, read) in table.items()}


def _parts(block: nn.Module, probe: Probe) -> Parts | None:
    """The block's parts, or None where the probe did not call it or no part of it reports attention."""
    if block not in probe.calls:
        return None
    called = sorted(((name, m) for name, m in block.named_children() if m in probe.calls),
                    key=lambda item: probe.calls[item[1]].order)
    attention = next(((name, m) for name, m in called
                      if any(q is m or q in set(m.modules()) for q in probe.queries)), None)
    if attention is None:
        return None
    norms = [(name, m) for name, m in called if is_norm(m) or (isinstance(m, nn.Identity) and "norm" in name.lower())]
    others = [(name, m) for name, m in called if not is_norm(m) and m is not attention[1]
              and any(True for _ in m.parameters())]
    return Parts(probe.calls[block], attention, norms, others, probe)


def _without(table: TapTable, *names: str) -> TapTable:
    """The table less the residual hooks whose sums the probe could not show (they would mean something else)."""
    return {name: place for name, place in table.items() if name not in names}


def _is_mlp_side(name: str) -> bool:
    return name.startswith(("ln2.", "mlp.")) or name in ("hook_resid_mid", "hook_mlp_out")

