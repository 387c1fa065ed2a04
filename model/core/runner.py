"""What every model in the app offers: run text through it and get a Trace."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from attention_atlas.model.core.attention.source import PatternSource
from attention_atlas.model.core.attention.summary import SiteSummary
from attention_atlas.model.core.capture.ablation import Outcome
from attention_atlas.model.core.capture.patching import Patch
from attention_atlas.model.core.capture.record import Captured
from attention_atlas.model.core.generation.decoding import Stepper
from attention_atlas.model.core.options import AblationMode, Head, RunOptions
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.core.trace.kept_masks import compact, sharing_site_masks
from attention_atlas.model.core.trace.trace import Trace


class Runner(Protocol):
    """A loaded model that turns text into a Trace."""

    facts: ModelFacts
    examples: tuple[str, ...]  # texts to offer a person first

    def run(self, text: str, target: str | None = None, options: RunOptions = RunOptions()) -> Trace:
        """Trace one forward pass. target=None: generate the output (greedy, under the masks of `options`)
        and trace it; else trace the model reading `target` (teacher forcing). ValueError for unusable text."""
        ...

    def stepper(self, text: str, options: RunOptions) -> Stepper:
        """Generation from `text` one token at a time, under the causal choice of `options` (the Generate page).
        ValueError for an encoder, or a text the model cannot read."""
        ...

    def cautions(self, text: str) -> tuple[str, ...]:
        """What a person should know before reading this text's output (e.g. longer than the model learned)."""
        ...

    def ablation_outcomes(self, trace: Trace, rows: Sequence[Sequence[Head]], mode: AblationMode) -> Outcome:
        """What the input of `trace` (unpadded) leads to, once per row of a batch that ablates the heads `rows[b]`
        in row b (model/core/capture/ablation.py); rows = [()] is the model whole."""
        ...

    def patched_outcomes(self, trace: Trace, clean: dict[str, np.ndarray], rows: Sequence[Patch | None]) -> Outcome:
        """What the input of `trace` (a corrupted text, unpadded) leads to, once per row of a batch that patches the
        activation `rows[b]` of a clean run (`clean`: hook name -> value) into row b (None: nothing)."""
        ...

    def gradients(self, trace: Trace, hooks: Sequence[str], position: int,
                  metric: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, np.ndarray]:
        """The gradient of `metric(logits)`, the logits (vocab,) predicted after `position` of the decoder's sequence
        (one that `patched_outcomes` reads) in a run of `trace`'s input, with respect to each hook's value (batch
        removed, as the trace holds it). UserError where the runs read no such position."""
        ...


def trace_of_run(
    facts: ModelFacts, ids: list[int], target_ids: list[int], token_strings: Callable[[list[int]], list[str]],
    masks: Mapping[str, torch.Tensor], captured: Mapping[str, Captured], **fields: Any,
) -> Trace:
    """The Trace of one run of batch size 1: token strings from `token_strings(ids)`, each mask (q_len, k_len) as
    numpy (`compact`: a causal mask as its diagonals), each captured value without its batch dimension (patterns kept
    as sources, holding their site's mask, and site summaries apart); `fields` are the Trace's other fields."""
    site_masks = {site: compact(mask.cpu().numpy()) for site, mask in masks.items()}
    return Trace(
        facts=facts, tokens=token_strings(ids), ids=ids, target_tokens=token_strings(target_ids),
        target_ids=target_ids, masks=site_masks,
        captured={name: value[0] for name, value in captured.items() if isinstance(value, np.ndarray)},
        pattern_sources=sharing_site_masks({name: value[0] for name, value in captured.items()
                                            if isinstance(value, PatternSource)}, site_masks),
        summaries={site: value for site, value in captured.items() if isinstance(value, SiteSummary)},
        **fields,
    )

