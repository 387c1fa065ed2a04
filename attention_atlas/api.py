"""The Python API: `load` a model, `Model.run` it on text, read the Trace by hook name; `load_trace` reads a saved
one. `attention_atlas/__init__.py` exports these names (docs/python.md lists them); nothing here imports Streamlit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from attention_atlas.model.core.devices import pick_device, pick_precision
from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.options import AblationMode, CausalMode, RunOptions
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.facts import ModelFacts
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.hf.placement import Placement, parse_budgets
from attention_atlas.model.inspect.attribution import Attribution, attribute, attribution_options
from attention_atlas.model.inspect.circuit import Circuit, find_circuit
from attention_atlas.model.inspect.contributions import (
    THRESHOLD,
    ContributionGraph,
    contribution_graph,
    contribution_options,
)
from attention_atlas.model.inspect.patching import Patching, attribution_patching, patch
from attention_atlas.model.inspect.score_parts import PatternParts, ScoreParts, explain_pattern, explain_score
from attention_atlas.model.inspect.score_setup import score_options
from attention_atlas.model.inspect.tour import tour_options
from attention_atlas.model.registry import list_model_ids, load_runner

PATTERNS = ("*.hook_pattern",)  # what `run` records unless asked: every attention pattern


class Model:
    """A loaded model: `run` it on text. Made by `load`; holds the weights, so keep one and run it many times."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._names: list[str] | None = None

    @property
    def id(self) -> str:
        """The model id or folder it was loaded from."""
        return self._runner.facts.model_id

    @property
    def facts(self) -> ModelFacts:
        """What it is: kind, layers, heads, d_model, positional scheme, device, precision …"""
        return self._runner.facts

    @property
    def examples(self) -> tuple[str, ...]:
        """Texts it reads well (a toy model: its task's)."""
        return self._runner.examples

    def __repr__(self) -> str:
        f = self.facts
        layers = f.n_encoder_layers + f.n_decoder_layers
        return f"<attention_atlas.Model {self.id}: {f.kind}, {layers} layers x {f.n_heads} heads, d_model {f.d_model}>"

    def run(self, text: str, *, target: str | None = None, hooks: str | Sequence[str] = PATTERNS,
            causal: CausalMode = "auto", ablate: Sequence[tuple[str, int]] = (),
            ablation: AblationMode = "zero") -> Trace:
        """Run the model on `text` and record the hooks named by `hooks` (glob patterns of hook names: "*" for every
        one, "decoder.*.hook_resid_post" …). target: the output an encoder-decoder or a decoder reads (teacher
        forcing); None: it generates its own (greedy). causal: "auto" (as trained), "on" or "off" everywhere.
        ablate: heads whose output is replaced in this run, as (attention, head): ("decoder.3.attn", 2), by
        zero or by their mean over the positions (`ablation`). ValueError says what is wrong with the input."""
        patterns = (hooks,) if isinstance(hooks, str) else tuple(hooks)
        options = RunOptions(hooks=patterns, causal=causal, ablated=tuple((site, int(head)) for site, head in ablate),
                             ablation=ablation)
        trace = self._runner.run(text, target, options)
        unmatched = [p for p in patterns if not any(fnmatchcase(name, p) for name in trace.names())]
        if unmatched:
            raise UserError(f"no hook of {self.id} matches {', '.join(map(repr, unmatched))}; its hooks are: "
                             f"{', '.join(self.names())}")
        return trace

    def tour(self, text: str, *, target: str | None = None) -> Trace:
        """Run the model on `text` recording what the Tour draws (each stack's input and output, its first block
        whole, every block's output): `aa.plot.tour_steps(trace)` lists the steps, `aa.plot.tour(trace, step)` draws
        one. target: as for `run`."""
        return self._runner.run(text, target, tour_options(self.facts))

    def attribute(self, text: str, answer: str, wrong: str | None = None, *, target: str | None = None,
                  position: int = -1) -> Attribution:
        """Direct logit attribution: each head's, each MLP's and the embeddings' direct share of the logit of `answer`
        (minus that of `wrong`: " Mary" vs " John"), each a single token, at `position` of the decoder's sequence (-1:
        its last, the prediction of the next token), the final norm's scale taken from this run. `.heads` (layers,
        heads), `.mlp` (layers,), `.total` (the parts and the biases: the logit difference), `.model_logit` (the
        model's own). An encoder-decoder reads `target` (teacher forcing) or its own output. UserError for an
        encoder, an answer of several tokens, a model whose layout offers no hook the split reads (a post-norm OPT),
        or parts that do not add up to the model's own logit (never a wrong split)."""
        trace = self._runner.run(text, target, attribution_options(self._runner))
        return attribute(self._runner, trace, answer, wrong, position)

    def patch(self, clean: str, corrupted: str, *, answer: str, wrong: str, kinds: Sequence[str] | None = None,
              target: str | None = None, position: int = -1, estimate: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Patching:
        """Activation patching: each activation of the run on `clean` put, one at a time, into the run on `corrupted`
        (as many tokens), read as the logit difference of `answer` over `wrong` (one token each) after `position` of
        the decoder's sequence (-1: its last). `.clean` and `.corrupted` are the two runs' differences; `.results`
        holds, for each of `kinds` (None: every kind of the model), `resid_pre`, `attn_out`, `mlp_out` (layers,
        positions) and `head_out` (layers, heads), each patched run's difference; `.normalised(kind)` puts them on
        0 = corrupted, 1 = clean. An encoder-decoder's texts are sources: those kinds patch its encoder, and
        `cross_head_out` (layers, heads) its decoder's cross-attention heads; both runs read `target` (an
        encoder-decoder's or a toy's output; None: the clean run's own). `progress(done, total)` after each batch of
        patched runs. `estimate`: attribution patching's first-order estimates instead (one backward pass: seconds).
        UserError for an encoder, texts of different lengths, or two texts that give the same logit difference
        (nothing to restore)."""
        chosen = None if kinds is None else tuple(kinds)
        if estimate:
            return attribution_patching(self._runner, clean, corrupted, answer, wrong, chosen, target=target,
                                        position=position)
        return patch(self._runner, clean, corrupted, answer, wrong, chosen, target=target, position=position,
                     progress=progress)

    def contributions(self, text: str, *, position: int = -1, threshold: float = THRESHOLD) -> ContributionGraph:
        """The contribution graph of the prediction after `position` (-1: the last token) of a causal LM's run on
        `text` (Ferrando and Voita 2024): `.edges`, each an `Edge` (kind "attention", "mlp" or "residual", `level`
        and `layer`, `source` and `target` tokens, `weight` its share of the sum it joins, and for attention the
        `head` that brings most), on the routes from the prediction down to the tokens, each share above
        `threshold`. UserError for models whose stream is not attention's sum, then the MLP's."""
        trace = self._runner.run(text, None, contribution_options())
        return contribution_graph(self._runner, trace, position, threshold)

    def circuit(self, clean: str, corrupted: str, *, answer: str, wrong: str, method: str = "EAP-IG", steps: int = 5,
                progress: Callable[[int, int], None] | None = None) -> Circuit:
        """The circuit that carries the prediction after the last token of `clean` against `corrupted` (as many
        tokens), read as the logit difference of `answer` over `wrong` (one token each): every edge of the EAP-IG
        library's graph (input, each head's query, key and value, each MLP, the logits) scored by `method` ("EAP-IG":
        `steps` interpolations of the inputs; "EAP"), `.scores` {edge: score}, `.top(n)`, `.evaluate(edges)`,
        `.faithfulness(ns)` (0 = corrupted, 1 = clean). `progress(done, total)` after each pass. UserError for a
        model whose stream is not the graph's sum (toys, encoders, hybrids, parallel or post-norm blocks ...), texts
        of different lengths, or two texts that give the same logit difference."""
        return find_circuit(self._runner, clean, corrupted, answer, wrong, method, steps, progress=progress)

    def explain_score(self, text: str, *, layer: int, head: int, query: int, key: int, site: str | None = None,
                      target: str | None = None) -> ScoreParts:
        """Why `head` of `layer` attends from position `query` to position `key` (-1: the last): its score taken
        apart into what each part of the residual stream wrote (the embeddings, each earlier head, each attention
        output bias, each MLP, the norms' and projection's biases), on the query side and on the key side, every
        norm's scale frozen at this run's. `.query_shares` and `.key_shares` each add up, with `.position_bias`, to
        `.score` (the model's own, scale included, before any soft-capping, the mask and the softmax); `.pairs`
        (query parts x key parts) too. site: "decoder.attn", "encoder.attn" or "decoder.cross_attn" (queries from
        the decoder, keys from the encoder's output); None: the self-attention over `trace.tokens` (the encoder's in
        an encoder-decoder), which the positions index. target: as for `run`. UserError for a hybrid, latent
        attention, a key the mask hides, a norm inside the attention's output (Gemma 2), or parts that do not add up
        to the model's score."""
        chosen = self._self_site() if site is None else site
        trace = self._runner.run(text, target, score_options(self._runner, chosen, layer))
        return explain_score(self._runner, trace, chosen, layer, head, query, key)

    def explain_pattern(self, text: str, *, layer: int, head: int, query: int, site: str | None = None,
                        target: str | None = None) -> PatternParts:
        """`explain_score` for one whole row: every key the query at `query` may see (`.keys`), each score taken
        apart: `.query_shares` and `.key_shares` (parts, keys), `.scores` and `.pattern` (keys,). Arguments and
        refusals as `explain_score`."""
        chosen = self._self_site() if site is None else site
        trace = self._runner.run(text, target, score_options(self._runner, chosen, layer))
        return explain_pattern(self._runner, trace, chosen, layer, head, query)

    def _self_site(self) -> str:
        """The self-attention over the text's own tokens: the encoder's, or a decoder-only model's."""
        return "decoder.attn" if self.facts.kind == "decoder" else "encoder.attn"

    def names(self) -> list[str]:
        """Every hook name this model records (on its first example text; an encoder-decoder's cross-attention
        and decoder hooks included)."""
        if self._names is None:
            self._names = self._runner.run(self.examples[0], None, RunOptions(hooks=("*",))).names()
        return self._names


def load(model: str | Path, *, device: str = "auto", precision: str = "auto", device_map: str | None = None,
         max_memory: dict[str, str] | Sequence[str] | None = None, offload_folder: str | Path | None = None,
         progress: Callable[[str], None] | None = None, backend: str = "local", simulate: bool = False) -> Model:
    """Load a model: an id (`list_models()`: toy-date, minilm, smollm2 …), a Hugging Face model folder or hub id,
    or a toy model folder (as `attention-atlas train --out DIR` writes one).
    device: "auto" (CUDA, then MPS, then the CPU), "cpu", "cuda" or "mps"; precision: "auto" (bfloat16 on a GPU
    that has it, float16 on other GPUs, float32 on the CPU), "float32", "bfloat16" or "float16".
    device_map="auto" spreads a Hugging Face model over the GPUs, the CPU and the disk (accelerate), each device up
    to its max_memory budget ({"0": "20GiB", "cpu": "64GiB"}); offload_folder: where weights that must be converted
    before they go to the disk are written. backend="ndif": a decoder NDIF hosts (a hub id), each run one nnsight
    request with the key in NDIF_API_KEY (docs/serving.md; the text leaves this machine); simulate=True runs the
    same requests here, through nnsight's serialisation round trip (a folder, or a hub id in the cache).
    ValueError with a sentence if the model cannot be loaded."""
    if backend != "local":
        return Model(_load_ndif(str(model), backend, simulate, progress, device, precision, device_map))
    if device_map not in (None, "auto"):
        raise UserError(f"device_map is 'auto' or None, not {device_map!r}")
    if (max_memory or offload_folder) and device_map is None:
        raise UserError("max_memory and offload_folder go with device_map='auto'")
    budgets = [f"{d}={size}" for d, size in max_memory.items()] if isinstance(max_memory, dict) else max_memory
    placement = None if device_map is None else Placement(parse_budgets(list(budgets or [])),
                                                          None if offload_folder is None else str(offload_folder))
    where = pick_device(device)
    try:
        runner = load_runner(str(model), device=where, precision=pick_precision(precision, where),
                             placement=placement, progress=progress)
    except UserError as error:
        if Path(model).exists() or "known models" in str(error):
            raise
        raise UserError(f"{error} (the model ids here: {', '.join(list_model_ids())}; or a Hugging Face model "
                         "folder, or a hub id where the Hub can be reached)") from error
    return Model(runner)


def _load_ndif(model: str, backend: str, simulate: bool, progress: Callable[[str], None] | None, *local: Any) -> Runner:
    """The runner of a model on NDIF (model/ndif: nnsight is imported only here); UserError for another backend, or
    with a device, precision or device_map, which NDIF chooses."""
    if backend != "ndif":
        raise UserError(f"backend is 'local' or 'ndif', not {backend!r}")
    if local != ("auto", "auto", None):
        raise UserError("NDIF chooses where the model runs and in what precision: leave device, precision and "
                        "device_map as they are with backend='ndif'")
    from attention_atlas.model.ndif.opening import open_ndif

    return open_ndif(model, simulate=simulate, progress=progress)


def load_trace(path: str | Path) -> Trace:
    """A trace saved with `Trace.save` (or `attention-atlas trace --out`). Never unpickles; a file that is not a
    trace, or was written by a newer version, raises ValueError with a sentence saying so."""
    return Trace.load(path)


def list_models() -> list[str]:
    """The model ids `load` takes by name here: the toy models, then the pretrained ones whose package is installed."""
    return list_model_ids()
