"""The app's figures as plotly figures from a Trace, for notebooks (Jupyter, VS Code, marimo draw a `go.Figure`
inline):

    import attention_atlas as aa
    model = aa.load("toy-date")
    trace = model.run("march 3 2021")
    aa.plot.head(trace, "decoder.1.cross_attn.hook_pattern", head=2)

Each function draws through the same code as its page, with the page's defaults: a figure here is the app's figure
for the same model, text and choice. A mistake raises ValueError with a sentence saying what to do (a hook the trace
lacks: the hooks= to run with; an unknown site: the trace's sites). Nothing here imports Streamlit."""

from attention_atlas.model.inspect.tour import tour_steps
from attention_atlas.plot.attention import head, lines, model_view
from attention_atlas.plot.circuit import circuit
from attention_atlas.plot.explain import explain
from attention_atlas.plot.generating import generation
from attention_atlas.plot.long_head import by_distance, pooled, sink_apart
from attention_atlas.plot.masking import masks
from attention_atlas.plot.positions import positional
from attention_atlas.plot.stream import logit_lens, residual
from attention_atlas.plot.tour import tour

__all__ = ["by_distance", "circuit", "explain", "generation", "head", "lines", "logit_lens", "masks", "model_view",
           "pooled", "positional", "residual", "sink_apart", "tour", "tour_steps"]
