"""Pure figure functions: numpy arrays and DataFrames in, plotly figures out. No Streamlit, no models."""

if __name__ != "attention_atlas.viz":  # the folder is also reachable from the repository root as `viz`
    raise ImportError("viz/ is the package attention_atlas.viz: import it by that name "
                      "(one copy of each module)")
