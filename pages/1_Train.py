"""Train one method: pick the model, data, method and settings, and watch it train."""

import streamlit as st

from peftviz import appkit
from peftviz.config import PRESETS, TrainConfig, over_seeds, preset_config
from peftviz.data import BUILTIN, HUB_DATASETS, DataError, load_data
from peftviz.methods import METHODS
from peftviz.runs import CACHE_DIR, atomic_write, store_dir

appkit.page(
    "Train",
    "Train one classifier and store it as a run. The presets fill in sensible settings: `quick` is the offline "
    "MiniLM on bbc-news (a minute or two per method on a laptop CPU), `smoke` a tiny random model (seconds). "
    "Each setting's help text says what it does.",
)

left, right = st.columns(2)
with left:
    preset = st.selectbox("Preset", list(PRESETS), index=list(PRESETS).index("quick"))
    method = st.selectbox("Method", list(METHODS), index=list(METHODS).index("prefix-propagation"))
    source = st.radio("Data", ["built-in or hub name", "upload a file", "local path"], horizontal=True)
    if source == "built-in or hub name":
        dataset = st.selectbox("Dataset", [BUILTIN, *HUB_DATASETS], help="hub names need the Hugging Face hub")
    elif source == "upload a file":
        upload = st.file_uploader("CSV or JSONL with 'text' and 'label' columns", type=["csv", "jsonl"])
        dataset = None
        if upload is not None:
            folder = CACHE_DIR / "uploads"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / upload.name
            atomic_write(path, lambda tmp: tmp.write_bytes(upload.getvalue()))
            dataset = str(path)
    else:
        dataset = st.text_input("Path", placeholder="data.csv, data.jsonl, or a folder of class sub-folders")
    model = st.text_input("Model", PRESETS[preset]["model"], help=TrainConfig.help()["model"])

defaults = preset_config(preset, method)
with right:
    with st.expander("Training settings", expanded=True):
        names = ("epochs", "learning_rate", "max_length", "batch_size", "limit", "seed", "schedule", "pooling")
        settings = {name: getattr(defaults, name) for name in names}
        help_text = TrainConfig.help()
        settings["epochs"] = int(st.number_input("epochs", 1, 100, settings["epochs"], help=help_text["epochs"]))
        settings["learning_rate"] = st.number_input(
            "learning_rate", 1e-7, 1.0, settings["learning_rate"], format="%g", help=help_text["learning_rate"]
        )
        settings["max_length"] = int(st.number_input("max_length", 8, 4096, settings["max_length"], help=help_text["max_length"]))
        settings["limit"] = int(st.number_input("limit (0 = all)", 0, 10**7, settings["limit"] or 0, help=help_text["limit"])) or None
        settings["seed"] = int(st.number_input("seed", 0, 10**6, settings["seed"], help=help_text["seed"]))
        n_seeds = int(st.number_input(
            "seeds", 1, 10, 1, help="train once per training seed: seed, seed + 1, …; the split stays the same, "
            "so the runs form a group that the Calibration page shows as a mean with an interval",
        ))  # fmt: skip
        settings["schedule"] = st.selectbox("schedule", ["linear", "cosine"], help=help_text["schedule"])
        settings["pooling"] = st.selectbox("pooling", ["cls", "mean"], help=help_text["pooling"])
    with st.expander(f"{method} options", expanded=True):
        options = appkit.options_form(METHODS[method].config_class, defaults.method_options, key=method)

if st.button("Train", type="primary", disabled=appkit.training_now()):
    try:
        if not dataset:
            raise DataError("choose a dataset first")
        config = preset_config(preset, method, model=model, dataset=dataset, method_options=options, **settings)
        load_data(config.dataset, seed=config.data_seed, limit=config.limit)  # fail here, on the page, not in the job
        seeds = list(range(config.seed, config.seed + n_seeds))
        appkit.job_manager().start(over_seeds([config], seeds), store_dir())
    except ValueError as err:  # bad settings, DataError
        appkit.show_error(err)
appkit.job_panel()
