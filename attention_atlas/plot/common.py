"""What the figures of attention_atlas.plot share with the app's pages: the names a page gives a site, a stack's
tokens, and the checks that turn a mistake (an unknown site, a hook the trace lacks) into a sentence saying what to do
instead."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from attention_atlas.api import Model
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.sites import PATTERN_SUFFIX, Site
from attention_atlas.model.core.trace.trace import Trace

STACKS = ("encoder", "decoder")


def site_label(trace: Trace, site: str) -> str:
    """The site's name, with "(masked)" when a mask of this run hides some key from some query."""
    return Site.of(site).label + (" (masked)" if not trace.masks[site].all() else "")


def layer_count(trace: Trace, stack: str) -> int:
    return trace.facts.n_encoder_layers if stack == "encoder" else trace.facts.n_decoder_layers


def stack_tokens(trace: Trace, stack: str) -> list[str]:
    """The tokens a stack reads: the decoder of an encoder-decoder reads the output."""
    return trace.query_tokens(f"{stack}.attn")


def stacks(trace: Trace) -> list[str]:
    """The stacks of the trace's model, in order: "encoder", "decoder", or both."""
    return [stack for stack in STACKS if layer_count(trace, stack)]


def check_stack(trace: Trace, stack: str | None, default: str | None = None) -> str:
    """`stack` if the model has it; None: `default`, else the model's first stack. ValueError names its stacks."""
    own = stacks(trace)
    if stack is None:
        return default or own[0]
    if stack not in own:
        raise UserError(f"{trace.facts.model_id} has no {stack!r} stack; its stacks: {', '.join(map(repr, own))}")
    return stack


def check_site(trace: Trace, site: str | None, sites: Sequence[str] | None = None) -> str:
    """`site` if it is one of `sites` (default: the trace's attention sites, `trace.sites()`); None: the first.
    ValueError names the sites there are."""
    sites = trace.sites() if sites is None else list(sites)
    if not sites:
        raise UserError("this trace holds no attention pattern: run the model with them recorded, e.g. "
                         "model.run(text) (its default hooks are every '*.hook_pattern')")
    if site is None:
        return sites[0]
    if site not in sites:
        own = Site.of(site) if site in trace.masks else None  # a site of the model that the run did not record
        hint = f"; record it with model.run(text, hooks='{own.stack}.*.{own.kind}.hook_pattern')" if own else ""
        raise UserError(f"this trace has no attention site {site!r}; its sites: {', '.join(map(repr, sites))}{hint}")
    return site


def check_pattern(trace: Trace, name: str) -> tuple[str, int]:
    """(site, layer) of an attention pattern's hook name ("decoder.1.cross_attn.hook_pattern"), which the trace must
    hold; ValueError says which names it holds, or how to record this one."""
    patterns = [n for n in trace.names() if n.endswith(f".{PATTERN_SUFFIX}")]
    parts = name.split(".")
    site = f"{parts[0]}.{parts[2]}" if len(parts) == 4 and parts[1].isdigit() else None
    if site is None or parts[3] != PATTERN_SUFFIX or site not in trace.masks:
        raise UserError(f"{name!r} is not an attention pattern's hook name of {trace.facts.model_id} (they read "
                         f"'<site's stack>.<layer>.<attn or cross_attn>.hook_pattern'); this trace's are: "
                         f"{', '.join(patterns) or 'none'}")
    layer, layers = int(parts[1]), trace.n_layers(site)
    if layer >= layers:
        raise UserError(f"{trace.facts.model_id}'s {parts[0]} has {layers} layers (0–{layers - 1}), not {layer}")
    if name not in patterns:
        raise UserError(f"this trace holds no {name!r}: its patterns are {', '.join(patterns) or 'none'}. Run the "
                         f"model with it recorded: model.run(text, hooks={name!r})")
    return site, layer


def check_index(value: int, count: int, what: str) -> int:
    """`value` if it lies in 0..count-1 (negative values count from the end, as in Python); ValueError otherwise."""
    if not -count <= value < count:
        raise UserError(f"{what} {value} does not exist: there are {count} (0–{count - 1})")
    return value % count


def need_hooks(trace: Trace, names: Sequence[str], patterns: Sequence[str], what: str) -> None:
    """ValueError when the trace lacks any of the hook `names`: it says which, and to run with hooks=`patterns`."""
    absent = [name for name in names if name not in trace]
    if not absent:
        return
    more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
    hooks = patterns[0] if len(patterns) == 1 else tuple(patterns)
    recorded = [p for p in patterns if fnmatchcase(absent[0], p) and any(fnmatchcase(n, p) for n in trace.names())]
    hint = f" This trace was run with {recorded[0]!r}: {trace.facts.model_id} may not offer it." if recorded else ""
    raise UserError(f"{what} reads {absent[0]}{more}, which this trace does not hold. Run the model with it "
                     f"recorded: model.run(text, hooks={hooks!r}).{hint}")


def runner_of(model: Model | Runner) -> Runner:
    """The runner of an `attention_atlas.Model` (or a runner itself, as the app holds one)."""
    return model._runner if isinstance(model, Model) else model


def check_same_model(trace: Trace, runner: Runner) -> None:
    """ValueError when the trace was made by another model than `runner`'s."""
    if trace.facts.model_id != runner.facts.model_id:
        raise UserError(f"this trace was made by {trace.facts.model_id}, not by {runner.facts.model_id}: pass the "
                         "model that made it")
