"""Train one method: pick the model, data, method and settings, and watch it train."""

import streamlit as st

from peftviz import appkit
from peftviz.config import PRESETS, TrainConfig, over_seeds, preset_config
from peftviz.data import BUILTIN, HUB_DATASETS, DataError, load_data
from peftviz.engine import check_machine
from peftviz.methods import DEFAULT_METHOD, METHODS
from peftviz.paths import store_dir
from peftviz.uploads import as_uploaded, store_upload

SETTINGS = ("epochs", "learning_rate", "max_length", "batch_size", "limit", "seed", "schedule", "pooling", "precision",
            "gradient_checkpointing")  # fmt: skip

appkit.page(
    "Train",
    "Train one classifier and store it as a run. The presets fill in sensible settings: `quick` is the offline "
    "MiniLM on bbc-news (a minute or two per method on a laptop CPU), `smoke` a tiny random model (seconds). "
    "Each setting's help text says what it does.",
)

left, right = st.columns(2)
with left:
    preset = st.selectbox("Preset", list(PRESETS), index=list(PRESETS).index("quick"))
    method = st.selectbox("Method", list(METHODS), index=list(METHODS).index(DEFAULT_METHOD))
    source = st.radio("Data", ["built-in or hub name", "upload a file", "local path"], horizontal=True)
    uploaded = None  # (where it is stored, the user's name for it): errors name the user's file
    if source == "built-in or hub name":
        dataset = st.selectbox("Dataset", [BUILTIN, *HUB_DATASETS], help="hub names need the Hugging Face hub")
    elif source == "upload a file":
        upload = st.file_uploader("CSV or JSONL with 'text' and 'label' columns", type=["csv", "jsonl"])
        dataset = None
        if upload is not None:
            try:
                uploaded = (store_upload(upload.name, upload.getvalue()), upload.name)  # stored by content
                dataset = str(uploaded[0])
            except appkit.PeftvizError as err:
                appkit.show_error(err)
    else:
        dataset = st.text_input("Path", placeholder="data.csv, data.jsonl, or a folder of class sub-folders")
    model = st.text_input("Model", PRESETS[preset]["model"], help=TrainConfig.help()["model"])

defaults = preset_config(preset, method)
with right:
    with st.expander("Training settings", expanded=True):
        settings = appkit.options_form(TrainConfig, defaults.to_dict(), key=f"train.{preset}.{method}", only=SETTINGS)
        n_seeds = int(st.number_input(
            "seeds", 1, 10, 1, help="train once per training seed: seed, seed + 1, …; the split stays the same, "
            "so the runs form a group that the Calibration page shows as a mean with an interval",
        ))  # fmt: skip
    with st.expander(f"{method} options", expanded=True):
        options = appkit.options_form(METHODS[method].config_class, defaults.method_options, key=method)

if st.button("Train", type="primary", disabled=appkit.training_now()):
    try:
        if not dataset:
            raise DataError("choose a dataset first")
        # a value out of range raises a one-line ConfigError here, never falls back to a default
        config = preset_config(preset, method, model=model, dataset=dataset, method_options=options, **settings)
        check_machine(config)  # a precision or device this machine lacks: here, on the page, not in the job
        load_data(config.dataset, seed=config.data_seed, limit=config.limit)
        seeds = list(range(config.seed, config.seed + n_seeds))
        appkit.job_manager().start(over_seeds([config], seeds), store_dir())
    except appkit.PeftvizError as err:  # bad settings, data or model
        appkit.show_error(as_uploaded(str(err), *uploaded) if uploaded else err)
appkit.job_panel()
