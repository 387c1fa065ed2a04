"""A Hugging Face decoder run as a circuit's graph (model/inspect/circuit_pass.py): its texts tokenised as the runner
tokenises them, its edits made through the project's thread-local edits (model/hf/patching.py `editing_taps`: a
shared model runs whole for every other thread), each MLP's own input edited at the block's `hook_resid_mid` (read
before the MLP's norm, so the stream itself is left as it is)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attention_atlas.model.core.capture.hooks import Edit, ModuleTap, ReportedTap
from attention_atlas.model.core.capture.patching import edits_by_tap
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.masks import self_attention_mask
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.hf.inputs import masked_inputs
from attention_atlas.model.hf.patching import editing_taps
from attention_atlas.model.hf.placement import input_device
from attention_atlas.model.hf.taps import first_input, first_output, output
from attention_atlas.model.inspect.norm_output import norm_module


class HFGraphForward:
    """How a Hugging Face decoder runs as its graph; UserError for one without the hooks the graph edits."""

    mlp_in = "hook_resid_mid"  # its tap reads the MLP's norm's input: an edit there is the MLP's alone

    def __init__(self, runner: Runner) -> None:
        refuse_missing_hooks(runner)
        self.runner = runner

    @property
    def device(self) -> torch.device:
        return input_device(self.runner.model)  # type: ignore[attr-defined]

    def encode(self, text: str) -> list[int]:
        return self.runner.text.encode(text)  # type: ignore[attr-defined]

    def tokens(self, ids: list[int]) -> list[str]:
        return self.runner.text.tokens(ids)  # type: ignore[attr-defined]

    def logits(self, ids: torch.Tensor, edits: dict[str, Edit]) -> torch.Tensor:
        """(batch, vocab) float32: the logits after the last token of `ids` (batch, len), each hook edited."""
        hf = self.runner.model  # type: ignore[attr-defined]
        batch, length = ids.shape
        allowed = self_attention_mask(length, length, True).expand(batch, 1, -1, -1)  # each row its own, as patching
        with editing_taps(hf, edits_by_tap(self.runner.taps, edits)):  # type: ignore[attr-defined]
            return hf(**masked_inputs(ids.to(self.device), allowed, hf.dtype), logits_to_keep=1).logits[:, -1].float()


def refuse_missing_hooks(runner: Runner) -> None:
    """UserError for a model without a hook the graph edits where the graph needs it: each block's input, each head's
    z, each MLP's own input (its norm's input) and output, the last block's output."""
    taps, last = runner.taps, runner.facts.n_decoder_layers - 1  # type: ignore[attr-defined]
    wanted = {f"decoder.{layer}.{name}": read for layer in range(last + 1) for name, read in
              (("hook_resid_pre", first_input), ("hook_resid_mid", first_input), ("hook_mlp_out", first_output),
               ("attn.hook_z", None))}
    wanted[f"decoder.{last}.hook_resid_post"] = first_output
    missing = [name for name, read in wanted.items() if not _editable(taps.get(name), read)]
    missing += [f"decoder.{layer}.hook_resid_mid" for layer in range(last + 1)
                if f"decoder.{layer}.hook_resid_mid" not in missing and taps[f"decoder.{layer}.hook_resid_mid"].module
                is not norm_module(runner, f"decoder.{layer}.ln2.hook_normalized")]
    if missing:
        raise UserError(f"{runner.facts.model_id} offers no {', '.join(missing[:3])} to edit as the circuit's graph "
                        "does (each head's output, each MLP's own input, the last block's output): no circuit can be "
                        "found in it here.")


def _editable(tap: object, read: Callable | None) -> bool:
    if read is None:
        return isinstance(tap, ReportedTap) and tap.quantity == "z"
    return isinstance(tap, ModuleTap) and (tap.read is read or (read is first_output and tap.read is output))
