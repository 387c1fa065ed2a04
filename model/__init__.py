"""The transformer from scratch, masks, hook capture into a Trace, the toy models. No Streamlit here."""
