"""The Attribution page's Circuit: the edges between heads and MLPs that carry the prediction from the sidebar's text
against the corrupted one (model/inspect/circuit.py: EAP or EAP-IG, as the EAP-IG library scores them), found with a
progress bar and a stop, drawn as a graph beside its faithfulness curve, the number of edges a slider. The circuit is
kept with the clean run in the server's cache (counted in its bytes: its runs hold every node's output), so a
session keeps only what it asked; a click on a head's node opens it on the Attention page."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import streamlit as st

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.core.runner import Runner
from attention_atlas.model.core.trace.trace import Trace
from attention_atlas.model.inspect.circuit import Circuit, circuit_steps
from attention_atlas.plot.circuit import MAX_DRAWN
from attention_atlas.plot.circuit import circuit as circuit_graph
from attention_atlas.ui.downloads import downloads, figure_label, file_name
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.run_scheduler import run_slots
from attention_atlas.ui.runs import readable_failures
from attention_atlas.ui.trace_cache import per_trace
from attention_atlas.viz.circuit import faithfulness_figure

ASKED = "_attribution_circuit"  # session key: what the circuit shown was asked for
METHODS = ("EAP-IG", "EAP")  # integrated gradients over the inputs; one gradient
HEAD_NODE = re.compile(r"^a(\d+)\.h(\d+)$")  # a head's node ("a1.h3"), as the graph names it


@dataclass
class Found:
    """A circuit and its faithfulness at some numbers of edges (more added as a person asks), kept in the cache."""

    circuit: Circuit
    curve: dict[int, float] = field(default_factory=dict)  # edges kept -> faithfulness

    @property
    def nbytes(self) -> int:
        runs = self.circuit.runs
        return int(runs.sources.nbytes + runs.texts.nbytes) + 120 * len(self.circuit.scores)  # names and floats

    def faithfulness(self, ns: list[int]) -> list[float]:
        """The curve at `ns`, each point evaluated once (a batch of runs for those not yet)."""
        missing = [n for n in ns if n not in self.curve]
        if missing:
            with run_slots():
                self.curve |= dict(zip(missing, self.circuit.faithfulness(missing).tolist(), strict=True))
        return [self.curve[n] for n in ns]


def curve_points(edges: int) -> list[int]:
    """0, 1, 2, 5, 10, 20, 50 … up to every edge."""
    points = [0] + [m * 10 ** e for e in range(7) for m in (1, 2, 5) if m * 10 ** e < edges]
    return [*points, edges]


def circuit_section(runner: Runner, shown: Trace, answer: str, wrong: str | None,
                    open_head: Callable[[str, int, int], None]) -> None:
    """The Circuit of the sidebar's text (`shown`, its last token) against the corrupted text of the patching
    section above, for `answer` − `wrong`."""
    st.subheader("Circuit")
    st.caption("The smallest set of connections that carries the prediction: every edge from a head or an MLP (or the "
               "embeddings) to a later head's query, key or value input, a later MLP, or the logits, scored by how "
               "much the logit difference would change if that edge alone carried the corrupted run (edge attribution "
               "patching, EAP; EAP-IG integrates the gradient between the corrupted and the clean embeddings). The "
               "faithfulness curve then runs the model with only the top edges carrying the clean run: 0 = the "
               "corrupted run, 1 = the clean run. Read after the text's last token.")
    corrupted = st.session_state.get("attribution_corrupted", "")
    if wrong is None or not corrupted:
        st.info("A circuit compares two runs: give a wrong answer and a corrupted text (Activation patching, above).",
                icon=":material/info:")
        return
    left, right = st.columns(2)
    method = left.segmented_control("Method", METHODS, key="attribution_circuit_method", default="EAP-IG",
                                    help="EAP: the gradient at the clean run, times the difference of the runs. "
                                         "EAP-IG: the gradient averaged over steps between the corrupted and the "
                                         "clean embeddings (more faithful, one pass a step).") or "EAP-IG"
    steps = right.slider("EAP-IG steps", 1, 20, 5, key="attribution_circuit_steps", disabled=method != "EAP-IG")
    asked = (corrupted, answer, wrong, method, steps if method == "EAP-IG" else 1)
    find, stop = st.columns(2)
    if find.button("Find the circuit", key="attribution_circuit_find", type="primary"):
        find_circuit(runner, shown, asked)
    stop.button("Stop the search", key="attribution_circuit_stop", help="Ends the search after the pass under way.")
    if st.session_state.get(ASKED) != asked:
        return
    try:
        found = per_trace(shown, ("circuit", *asked), _let_go)
    except LetGo:
        st.info("The circuit found for these texts is no longer kept by the server's memory: find it again.",
                icon=":material/info:")
        return
    show_circuit(runner.facts.model_id, found, open_head)


class LetGo(Exception):
    """The server's cache no longer holds the circuit a session found (it keeps what fits its budget)."""


def _let_go() -> Found:
    raise LetGo


def find_circuit(runner: Runner, shown: Trace, asked: tuple) -> None:
    """The circuit, pass by pass with a progress bar (a Stop's rerun ends it between passes), and the ends of its
    curve, kept with the clean run; the session keeps what it asked."""
    corrupted, answer, wrong, method, steps = asked
    bar = st.progress(0.0, text="The clean and the corrupted run…")

    def search() -> Found:
        for done, total, circuit in circuit_steps(runner, shown.text, corrupted, answer, wrong, method, steps,
                                                  slot=run_slots):
            bar.progress(done / total, text=f"{method}: {done} of {total} passes")
            if circuit is not None:
                found = Found(circuit)
                found.faithfulness(curve_points(len(circuit.scores)))
                return found
        raise AssertionError("circuit_steps ends with the circuit")

    try:
        readable_failures("Finding the circuit", lambda: per_trace(shown, ("circuit", *asked), search))
    except UserError as error:
        show_error(str(error))
        return
    finally:
        bar.empty()
    st.session_state[ASKED] = asked


def show_circuit(model_id: str, found: Found, open_head: Callable[[str, int, int], None]) -> None:
    circuit = found.circuit
    edges = len(circuit.scores)
    most = min(MAX_DRAWN, edges)
    kept = st.slider("Edges drawn (the largest |score| first)", 1, most, min(20, most), key="attribution_circuit_edges")
    points = sorted({*curve_points(edges), kept})
    values = found.faithfulness(points)
    chosen = values[points.index(kept)]
    st.caption(f"Logit difference {circuit.answer!r} − {circuit.wrong!r}: clean {circuit.clean:+.3f}, corrupted "
               f"{circuit.corrupted:+.3f}. The top {kept} of {edges:,} edges alone carry {chosen:.0%} of the way from "
               f"the corrupted run to the clean one (faithfulness {chosen:.3f}).")
    graph, curve = st.columns([3, 2])
    figure = circuit_graph(circuit, kept)
    graph.plotly_chart(figure, key="attribution_circuit_graph", selection_mode="points",
                       alt=figure_label(figure, csv=False),
                       on_select=partial(open_clicked_node, list(figure.data[0].customdata), open_head))
    line = faithfulness_figure(points, values, kept, f"faithfulness of the top-n circuit ({circuit.method})")
    curve.plotly_chart(line, key="attribution_circuit_curve", alt=figure_label(line, csv=False))
    name = file_name(model_id, "circuit", circuit.method)
    downloads(figure, name, "attribution_circuit_graph_files")
    downloads(line, f"{name}.faithfulness", "attribution_circuit_curve_files")
    st.caption("Red edges carry the clean answer (corrupting one alone lowers the logit difference), blue ones work "
               "against it; an edge into a head's query is solid, its key dashed, its value dotted. Click a head to "
               "open it on the Attention page.")


def open_clicked_node(names: list[str], open_head: Callable[[str, int, int], None]) -> None:
    """A click on a head's node (trace 0: `names`, each node's, in its order) opens it on the Attention page."""
    event = st.session_state.get("attribution_circuit_graph")
    points = [p for p in event.selection.points if p.get("curve_number") == 0] if event else []
    node = HEAD_NODE.match(str(names[int(points[0]["point_index"])])) if points else None
    if node:
        open_head("decoder.attn", int(node.group(1)), int(node.group(2)))
