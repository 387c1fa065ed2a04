"""Train: train the from-scratch transformer on a toy task in the background and watch its heads form: the loss and
accuracy as they fall, every head's attention on a probe example snapshot by snapshot on a timeline, and per-head
scores (induction, previous token, …) over the steps. The trained model, or any snapshot, then opens on every page;
it downloads as a toy model folder (zip) and uploads back."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attention_atlas.model.core.devices import available_devices
from attention_atlas.model.toy.archive import read_toy_archive
from attention_atlas.model.toy.live import as_sentence, training_problems
from attention_atlas.model.toy.settings import SCHEDULES
from attention_atlas.model.toy.tasks import TASKS
from attention_atlas.model.toy.train import Recipe, recipe_for
from attention_atlas.ui.messages import show_error
from attention_atlas.ui.session_models import add_session_model, open_model, session_models, still_listed
from attention_atlas.ui.training_runs import LIMITS, MAX_TRAININGS, current_training, forget_training, start_training
from attention_atlas.ui.training_views import show_training

DEFAULT_TASK = "induction"
SNAPSHOTS_AT_START = 60  # the default interval gives this many snapshots after the first (within the limit)
NORMS = {"pre": "pre-norm: x + sublayer(LN(x))", "post": "post-norm: LN(x + sublayer(x)) (the paper's)"}
FIELDS = ("layers", "heads", "d_model", "d_ff", "norm", "schedule", "lr", "warmup", "smoothing", "batch", "steps",
          "every")


def defaults(task: str) -> dict[str, object]:
    """The widgets' values for a task's recipe (`recipe_for`)."""
    recipe = recipe_for(task)
    c, s = recipe.config, recipe.settings
    return {"layers": c.n_decoder_layers, "heads": c.n_heads, "d_model": c.d_model, "d_ff": c.d_ff, "norm": c.norm,
            "schedule": s.schedule, "lr": s.peak_lr, "warmup": s.warmup, "smoothing": s.label_smoothing,
            "batch": s.batch_size, "steps": s.steps, "every": max(1, s.steps // SNAPSHOTS_AT_START)}


def load_defaults() -> None:
    """The task picker's callback (and the first run's): every field to the chosen task's recipe."""
    for name, value in defaults(st.session_state["train_task"]).items():
        st.session_state[f"train_{name}"] = value


def chosen_recipe() -> tuple[Recipe, int]:
    """The recipe and snapshot interval the form says. ValueError naming what is wrong."""
    v = {name: st.session_state[f"train_{name}"] for name in FIELDS}
    base = recipe_for(st.session_state["train_task"])
    encoder_decoder = base.config.kind == "encoder-decoder"
    config = replace(base.config, d_model=v["d_model"], n_heads=v["heads"], d_ff=v["d_ff"], norm=v["norm"],
                     n_encoder_layers=v["layers"] if encoder_decoder else 0, n_decoder_layers=v["layers"])
    settings = replace(base.settings, steps=v["steps"], batch_size=v["batch"], peak_lr=v["lr"],
                       schedule=v["schedule"], warmup=v["warmup"], label_smoothing=v["smoothing"])
    recipe = replace(base, config=config, settings=settings)
    problems = training_problems(recipe, v["every"], LIMITS)
    if problems:
        raise ValueError(as_sentence(problems))
    return recipe, v["every"]


def form() -> None:
    """The task, the model, how it trains, and Start."""
    if "train_task" not in st.session_state:
        st.session_state["train_task"] = DEFAULT_TASK
        load_defaults()
    st.selectbox("Task", list(TASKS), key="train_task", on_change=load_defaults,
                 format_func=lambda name: f"{name} · {TASKS[name].description}",
                 help="Each task has its own defaults: the induction task's form an induction head in 1–2 minutes.")
    task = TASKS[st.session_state["train_task"]]
    st.caption(f"A {task.kind} model. Probe example, whose attention is followed: "
               f"`{task.probe[0]}` → `{task.probe[1]}`.")
    st.markdown("**Model**")
    columns = st.columns(5)
    columns[0].number_input("Layers" + (" (encoder and decoder each)" if task.kind == "encoder-decoder" else ""),
                            key="train_layers", step=1)
    columns[1].number_input("Heads", key="train_heads", step=1, help="d_model must be a multiple of the heads.")
    columns[2].number_input("d_model", key="train_d_model", step=8)
    columns[3].number_input("d_ff", key="train_d_ff", step=32, help="The feed-forward layer's hidden width.")
    columns[4].radio("Norm placement", list(NORMS), key="train_norm", format_func=lambda n: NORMS[n].split(":")[0],
                     help=" · ".join(NORMS.values()))
    st.markdown("**Training**")
    columns = st.columns(6)
    columns[0].radio("Schedule", list(SCHEDULES), key="train_schedule", format_func=SCHEDULES.get)
    columns[1].number_input("Learning rate" + (" (peak)" if st.session_state["train_schedule"] == "paper" else ""),
                            key="train_lr", step=1e-4, format="%.4f")
    columns[2].number_input("Warm-up steps", key="train_warmup", step=50,
                            disabled=st.session_state["train_schedule"] != "paper")
    columns[3].number_input("Label smoothing", key="train_smoothing", step=0.05, format="%.2f")
    columns[4].number_input("Batch size", key="train_batch", step=8)
    columns[5].number_input("Steps", key="train_steps", step=500)
    left, right = st.columns([1, 2])
    left.number_input("Snapshot every … steps", key="train_every", step=10,
                      help=f"Every head's attention on the probe example is kept at these steps (at most "
                           f"{LIMITS.max_snapshots}: beyond, every other one is let go and the interval doubles).")
    right.selectbox("Device", ["auto", *available_devices()], key="train_device",
                    help="auto: a GPU when there is one, else the CPU.")
    st.caption(f"Limits of this server: {LIMITS.max_steps:,} steps, {LIMITS.max_minutes:g} minutes of training, "
               f"{LIMITS.max_parameters:,} parameters, batches of {LIMITS.max_batch_size}; one training per session "
               f"and {MAX_TRAININGS} at once in the server, paused ones included. A training, paused or not, stops "
               "when its session ends.")
    if st.button("Start training", type="primary", icon=":material/play_arrow:", key="train_start"):
        try:
            start_training(*chosen_recipe(), st.session_state["train_device"])
        except ValueError as error:
            show_error(str(error))
            return
        st.rerun()


def upload() -> None:
    """Open a toy model archive downloaded from this page."""
    with st.expander("Open a model file downloaded from this page"):
        data = st.file_uploader("Toy model archive (.zip)", type=["zip"], key="train_upload",
                                help="A zip of model.safetensors and config.json, as the download button writes it. "
                                     "Weights load as safetensors only: never a pickle.")
        if data is None:
            return
        uploaded = still_listed("train_uploaded")  # file id -> model id
        if data.file_id not in uploaded:  # read once, not at every rerun
            try:
                toy = read_toy_archive(data.getvalue())
            except ValueError as error:
                show_error(f"That file cannot be opened: {error}")
                return
            uploaded[data.file_id] = add_session_model(f"{toy.task.name}-upload", toy)
        model_id = uploaded[data.file_id]
        if st.button(f"Open {model_id} in the app", key="train_open_upload", on_click=open_model, args=(model_id,)):
            st.rerun()
        toy = session_models()[model_id].toy
        st.caption(f"{toy.task.description}: {sum(p.numel() for p in toy.model.parameters()):,} parameters. It is "
                   "listed in the sidebar's model list for this session.")


def page() -> None:
    """The page (in a function: no module global holds the training; see ui/downloads.py): the form, or the
    training under way or done; then the upload."""
    st.title("Train")
    st.caption("Train the from-scratch transformer on a toy task and watch its heads form. The model trains in the "
               "background: the other pages stay yours meanwhile.")
    training = current_training()
    if training is None:
        form()
    else:
        show_training(training)
        if training.done and st.button("New training", icon=":material/restart_alt:", key="train_new"):
            forget_training()
            st.rerun()
    upload()


page()
