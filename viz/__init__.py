"""Pure figure functions: numpy arrays and DataFrames in, plotly/altair figures out. No Streamlit, no models."""
