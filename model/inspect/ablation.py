"""How much ablating heads changes what a model concludes, for one choice of heads or for every head in turn.

The change is measured on the runner's `ablation_outcomes` (model/core/capture/ablation.py `Outcome`):
- distributions: the KL divergence KL(before || after) of the next-token distributions, in nats, averaged over the
  positions that matter (a causal LM: the one after the text);
- embeddings (encoders): 1 − the cosine similarity of each token's last-layer vector before and after, averaged
  over the tokens.
0 means no change in both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from attention_atlas.model.core.capture.ablation import Outcome
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import AblationMode, Head
from attention_atlas.model.core.trace.sites import Site
from attention_atlas.model.core.trace.trace import Trace

MAX_SCAN_WORK = 40_000  # tokens x heads one scan may read (SmolLM2: about 1 ms each on a 2-core CPU, bench.head_scan)
TOKENS_PER_PASS = 512  # a scan's batches: rows (one ablated head each) x tokens


class Ablatable(Protocol):
    def ablation_outcomes(self, trace: Trace, rows: Sequence[Sequence[Head]], mode: AblationMode) -> Outcome: ...


def kl_divergence(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """KL(before || after) in nats of log-probabilities (..., vocab) -> (...)."""
    before, after = before.astype(np.float64), after.astype(np.float64)
    return np.maximum((np.exp(before) * (before - after)).sum(-1), 0.0)  # rounding can give -1e-12


def cosine(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Cosine similarity of vectors (..., d) -> (...)."""
    before, after = before.astype(np.float64), after.astype(np.float64)
    norms = np.linalg.norm(before, axis=-1) * np.linalg.norm(after, axis=-1)
    return (before * after).sum(-1) / np.maximum(norms, 1e-30)


def per_position_change(outcome: Outcome, before_row: int, after_row: int) -> np.ndarray:
    """(positions,): KL (distributions) or 1 − cosine (embeddings) of row `after_row` against `before_row`."""
    before, after = outcome.values[before_row], outcome.values[after_row]
    if outcome.kind == "distributions":
        return kl_divergence(before, after)
    return 1.0 - cosine(before, after)


def change_name(outcome: Outcome) -> str:
    """What `per_position_change` measures, as a person reads it."""
    return "KL divergence (nats)" if outcome.kind == "distributions" else "1 − cosine similarity"


def every_head(trace: Trace) -> list[Head]:
    """Every head of the trace's model, site by site in model order, layer by layer."""
    heads = []
    for site_name in trace.masks:
        site = Site.of(site_name)
        for layer in range(trace.n_layers(site_name)):
            heads += [(f"{site.stack}.{layer}.{site.kind}", head) for head in range(trace.facts.n_heads)]
    return heads


def head_site(head: Head) -> tuple[str, int]:
    """("decoder.3.cross_attn", h) -> ("decoder.cross_attn", 3): the site and layer of a head."""
    stack, layer, kind = head[0].split(".")
    return f"{stack}.{kind}", int(layer)


@dataclass(frozen=True)
class HeadScan:
    """The change each head's ablation makes, by site: (layers, heads) arrays, with what was measured."""

    effects: dict[str, np.ndarray]  # site -> (layers, heads)
    measure: str
    mode: AblationMode

    def ranked(self) -> list[tuple[Head, float]]:
        """Every head with its change, largest first."""
        entries = [((f"{site.split('.')[0]}.{layer}.{site.split('.')[1]}", head), float(value))
                   for site, grid in self.effects.items() for (layer, head), value in np.ndenumerate(grid)]
        return sorted(entries, key=lambda entry: -entry[1])


def scan_work(trace: Trace) -> int:
    """Tokens x heads a scan of `trace` reads (compare MAX_SCAN_WORK)."""
    return (len(trace.ids) + len(trace.target_ids)) * len(every_head(trace))


def scan_heads(runner: Ablatable, trace: Trace, mode: AblationMode,
               on_progress: Callable[[int, int], None] = lambda done, total: None,
               tokens_per_pass: int = TOKENS_PER_PASS,
               slot: Callable[[], AbstractContextManager] = nullcontext) -> HeadScan:
    """Ablate each head of the model alone and measure the change, in batches of about `tokens_per_pass` tokens
    (a row per head; the first batch also runs the unablated model), each batch computed within its own `slot()`
    (the app's run slots: other runs take turns between batches). `on_progress(heads done, heads)` after each, the
    slot let go."""
    if scan_work(trace) > MAX_SCAN_WORK:
        raise UserError(f"Scanning every head of this text reads {scan_work(trace):,} token-heads; the limit here "
                         f"is {MAX_SCAN_WORK:,}. Shorten the text.")
    heads = every_head(trace)
    per_pass = max(1, tokens_per_pass // (len(trace.ids) + len(trace.target_ids)))
    changes: list[float] = []
    baseline: np.ndarray | None = None
    measure = ""
    for start in range(0, len(heads), per_pass):
        rows = [(head,) for head in heads[start : start + per_pass]]
        with slot():
            outcome = runner.ablation_outcomes(trace, rows if baseline is not None else [(), *rows], mode)
        if baseline is None:
            baseline = outcome.values[:1]
        compared = Outcome(outcome.kind, np.concatenate([baseline, outcome.values[-len(rows):]]), outcome.positions)
        changes += [float(per_position_change(compared, 0, row).mean()) for row in range(1, len(rows) + 1)]
        measure = change_name(outcome)
        on_progress(len(changes), len(heads))
    effects = {site: np.zeros((trace.n_layers(site), trace.facts.n_heads)) for site in trace.masks}
    for head, change in zip(heads, changes, strict=True):
        site, layer = head_site(head)
        effects[site][layer, head[1]] = change
    return HeadScan(effects, measure, mode)
