"""Device → NDIF in the sidebar: a Hugging Face decoder run on NDIF through nnsight (model/ndif), or the same requests
simulated here; and the key NDIF's runs are sent with.

The key is the environment's NDIF_API_KEY, or what a person types in a password box. The box's value is read for each
load and each run and handed to that one only (model/ndif/status.py `using_key`): it is not kept among the frame's
choices (ui/page.py FRAME_KEYS), never written to the URL, and never logged; the box itself holds it until the person
clears it or the session ends, as any widget holds its value. The model loaded for NDIF is shared by every session,
never its key: each run brings its own."""

from __future__ import annotations

import os

import streamlit as st

from attention_atlas.model.ndif.status import KEY_VARIABLE

NDIF, NDIF_SIMULATED = "NDIF", "NDIF, simulated"
DEVICES = (NDIF, NDIF_SIMULATED)
KEY_WIDGET = "ndif_key"  # the password box's session key
HELP = ("NDIF (the National Deep Inference Fabric) runs the largest open models (Llama-3.1 8B/70B/405B …) on its "
        "GPUs: give the model's hub id. The text leaves this machine for NDIF's servers. Simulated: the same requests "
        "run here, through nnsight's serialisation round trip, on a model folder or a cached hub id.")


def key_box(device: str) -> None:
    """Under Device → NDIF: where the key of NDIF's runs comes from, the environment (said in a caption) or a password
    box; under NDIF, simulated: that nothing leaves the machine."""
    if device == NDIF_SIMULATED:
        st.sidebar.caption("Each run goes through the request NDIF would receive, here: nothing leaves this machine.")
    if device != NDIF:
        return
    if os.environ.get(KEY_VARIABLE, "").strip():
        st.sidebar.caption(f"NDIF's key: the server's {KEY_VARIABLE}.")
        return
    st.sidebar.text_input("NDIF API key", type="password", key=KEY_WIDGET, max_chars=200,
                          help="Sent with each run to NDIF; not kept by the app, not put in the link. An account at "
                               "login.ndif.us gives one.")


def typed_key() -> str | None:
    """The key typed in the box in this session, if any (None: the environment's is used)."""
    typed = st.session_state.get(KEY_WIDGET)
    return typed.strip() or None if isinstance(typed, str) else None
