"""A model's list of blocks, and the hooks of its stack around them: hook_embed, hook_pos_embed, ln_final.* and
hook_resid_final."""

from __future__ import annotations

from torch import nn

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.hf.discovery.norms import is_norm, norm_value
from attention_atlas.model.hf.discovery.values import same, scaled_copy
from attention_atlas.model.hf.probe import Probe
from attention_atlas.model.hf.taps import TapTable, batched_output, first_input, norm_hooks, output


def block_list(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """(path under base_model, the list) of the model's blocks: the largest ModuleList of num_hidden_layers."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    count = getattr(config, "num_hidden_layers", None)
    lists = [(path, m) for path, m in model.base_model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) == count and len(m) > 0]
    if not lists:
        raise UserError(f"{type(model).__name__}: no list of {count} blocks found, so its layers cannot be read.")
    return max(lists, key=lambda item: sum(p.numel() for p in item[1].parameters()))


def stack_table(model: nn.Module, layers: nn.ModuleList, probe: Probe) -> TapTable:
    """hook_embed (x the model's scale, where it scales its embeddings: Gemma), hook_pos_embed (a learned position
    table), and ln_final.* and hook_resid_final (the norm read after the last block); paths under base_model."""
    base = model.base_model
    path_of = {module: path for path, module in base.named_modules()}
    table: TapTable = {}
    embedding = model.get_input_embeddings()
    first, last = probe.calls[layers[0]], probe.calls[layers[-1]]
    embedded = probe.calls[embedding].output
    positions = next((m for m in base.modules() if isinstance(m, nn.Embedding) and m is not embedding
                      and m in probe.calls and probe.calls[m].order < first.order), None)
    if positions is not None:
        table["hook_pos_embed"] = (path_of[positions], batched_output)
        table["hook_embed"] = (path_of[embedding], output)
    elif scaled_copy(first.input, embedded):  # the embeddings x the model's scale (Gemma: sqrt(d_model)) go in
        table["hook_embed"] = (path_of[layers[0]], first_input)
    else:
        table["hook_embed"] = (path_of[embedding], output)
    final = next((m for m in base.modules() if is_norm(m) and m in probe.calls
                  and probe.calls[m].order > last.order and same(probe.calls[m].input, last.output)), None)
    if final is not None:
        table |= norm_hooks("ln_final", path_of[final], norm_value(final))
        table["hook_resid_final"] = (path_of[final], output)
    return table
