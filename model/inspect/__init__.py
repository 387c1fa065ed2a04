"""Reading a loaded model to show what it computes, for every family (no Streamlit): its position scheme
(positions.py), one head's weights and that head recomputed from them (head_weights.py, head_math.py,
step_hooks.py), its unembedding and the logit lens (readout.py, lens.py), and the shape of every module's input
and output in one forward pass (shapes.py)."""
