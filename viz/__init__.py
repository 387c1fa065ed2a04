"""Pure figure functions: numpy arrays and DataFrames in, plotly figures out. No Streamlit, no models."""
