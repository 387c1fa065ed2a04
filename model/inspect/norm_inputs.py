"""What each norm reads, by hook name: the residual stream at that point, so that a page can show the norm's
input statistics (its mean) beside what it divides by (`hook_scale`), with no extra hook on the norm itself.

Pre-norm models normalise a copy of the stream before each block: ln1 reads `hook_resid_pre`, ln_cross reads
`hook_resid_mid`, ln2 the sum after the last attention block (`hook_resid_pre` where attention and the MLP run in
parallel), ln_final the stack's output (`stream_parts.stack_output`: a hybrid's last block, attention or not).
Post-norm models normalise the sum after each block: ln1 reads `hook_resid_mid`, ln_cross `hook_resid_mid_cross`,
ln2 `hook_resid_post` (the residual hooks are the sums before any norm: model/core/trace/hook_names.py).
"""

from __future__ import annotations

import re

from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.inspect.stream_parts import stack_output

_NORM_SCALE = re.compile(r"^(encoder|decoder)\.(?:(\d+)\.)?(ln1|ln2|ln_cross|ln_final)\.hook_scale$")


def norm_input(facts: ModelFacts, scale_hook: str) -> str | None:
    """The hook holding what the norm of `scale_hook` ("decoder.3.ln2.hook_scale") reads, (pos, d_model); None
    where this model's stream does not hold it (a final norm of a post-norm model)."""
    match = _NORM_SCALE.match(scale_hook)
    if match is None:
        raise ValueError(f"{scale_hook!r} is not a norm's hook_scale")
    stack, layer, norm = match.group(1), match.group(2), match.group(3)
    has_cross = stack == "decoder" and facts.kind == "encoder-decoder"
    post_norm = facts.norm.startswith("post")
    if norm == "ln_final":
        return None if post_norm else stack_output(facts, stack)
    if not post_norm:
        after_attention = "hook_resid_mid_cross" if has_cross else "hook_resid_mid"
        reads = {"ln1": "hook_resid_pre", "ln_cross": "hook_resid_mid",
                 "ln2": "hook_resid_pre" if "parallel" in facts.norm else after_attention}
    else:
        reads = {"ln1": "hook_resid_mid", "ln_cross": "hook_resid_mid_cross", "ln2": "hook_resid_post"}
    return f"{stack}.{layer}.{reads[norm]}"
