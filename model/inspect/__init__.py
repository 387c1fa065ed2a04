"""Reading a loaded model to show what it computes: its position scheme, one head's weights, and that head
recomputed from them (for the Positional encoding and Step-through pages); its unembedding and one plain forward
pass (readout.py, for the Activations page). Every family, no Streamlit."""
