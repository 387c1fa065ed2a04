"""The transformer from scratch, masks, hook capture into a Trace, the toy models. No Streamlit here."""

if __name__ != "attention_atlas.model":  # the folder is also reachable from the repository root as `model`
    raise ImportError("model/ is the package attention_atlas.model: import it by that name "
                      "(one copy of each module)")
