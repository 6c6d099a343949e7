"""Train one method: pick the model, data, method and settings, and watch it train; resume a run; or
import a model trained elsewhere (a peft adapter, a Hugging Face classifier, a peftviz export)."""

import streamlit as st

from peftviz import appkit, jobpanel
from peftviz.backbones import check_model
from peftviz.config import PRESETS, TrainConfig, over_seeds, preset_config
from peftviz.data import BUILTIN, HUB_DATASETS, load_data
from peftviz.engine import check_machine
from peftviz.errors import DataError, PeftvizError
from peftviz.exchange.request import ImportRequest
from peftviz.exchange.sources import check_source
from peftviz.methods import DEFAULT_METHOD, METHODS
from peftviz.paths import uploads_dir
from peftviz.uploads import as_uploaded, store_upload

SETTINGS = ("epochs", "learning_rate", "max_length", "batch_size", "limit", "seed", "schedule", "pooling", "precision",
            "gradient_checkpointing")  # fmt: skip

appkit.page(
    "Train",
    "Train one classifier and store it as a run. The presets fill in sensible settings: `quick` is the offline "
    "MiniLM on bbc-news (a minute or two per method on a laptop CPU), `smoke` a tiny random model (seconds). "
    "Each setting's help text says what it does.",
)
server = jobpanel.policy()
store_models = sorted({run.config.model for run in appkit.runs(usable_only=True)})
if server.shared:
    st.info(
        "This server is shared: it trains on the built-in corpus or a file you upload (at most "
        f"{server.upload_limit // 2**20} MB), with one of its models: {', '.join(server.models(store_models))}. "
        "Training jobs wait in line; you see your own."
    )

left, right = st.columns(2)
with left:
    preset = st.selectbox("Preset", list(PRESETS), index=list(PRESETS).index("quick"))
    method = st.selectbox("Method", list(METHODS), index=list(METHODS).index(DEFAULT_METHOD))
    source = st.radio("Data", ["built-in or hub name", "upload a file", "local path"], horizontal=True)
    uploaded = None  # (where it is stored, the user's name for it): errors name the user's file
    if source == "built-in or hub name":
        names = [BUILTIN] if server.shared else [BUILTIN, *HUB_DATASETS]
        dataset = st.selectbox("Dataset", names, help="hub names need the Hugging Face hub")
    elif source == "upload a file":
        upload = st.file_uploader("CSV or JSONL with 'text' and 'label' columns", type=["csv", "jsonl"])
        dataset = None
        if upload is not None:
            try:
                stored = store_upload(upload.name, upload.getvalue(), server.upload_limit)  # stored by content
                uploaded, dataset = (stored, upload.name), str(stored)
            except PeftvizError as err:
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

if st.button("Train", type="primary"):
    try:
        if not dataset:
            raise DataError("choose a dataset first")
        # on a shared server, decided from the names alone, before anything is opened or fetched
        server.check_dataset(dataset, BUILTIN, uploads_dir())
        server.check_model(model, store_models)
        # a value out of range raises a one-line ConfigError here, never falls back to a default
        config = preset_config(preset, method, model=model, dataset=dataset, method_options=options, **settings)
        check_machine(config)  # a precision or device this machine lacks: here, on the page, not in the job
        check_model(config.model)  # a model folder's config.json and tokenizer, without loading its weights
        load_data(config.dataset, seed=config.data_seed, limit=config.limit)
        jobpanel.submit(over_seeds([config], list(range(config.seed, config.seed + n_seeds))))
    except PeftvizError as err:  # bad settings, data or model
        appkit.show_error(as_uploaded(str(err), *uploaded) if uploaded else err)


def import_form(preset: str, dataset: str | None) -> None:
    """A model trained elsewhere, evaluated on the data chosen above and stored as a run (in the background)."""
    source = st.text_input("Folder or hub id", placeholder="./my-lora-adapter or owner/name", key="import_source")
    base = st.text_input("Base model (adapters only)", placeholder="default: the adapter's own", key="import_base")
    seed = st.number_input("Training seed it was trained with", 0, 2**32 - 1, 0, key="import_seed",
                           help="imports that differ only in their seed form a group on the Calibration page")  # fmt: skip
    if st.button("Import", key="train_import"):
        try:
            if not dataset:
                raise DataError("choose a dataset first")
            check_source(source.strip())
            load_data(dataset, limit=PRESETS[preset].get("limit"))
            settings = {"dataset": dataset, "seed": int(seed)}
            jobpanel.submit([], imports=[ImportRequest(source.strip(), settings, preset, base.strip() or None)])
        except PeftvizError as err:
            appkit.show_error(err)


with st.expander("Import a model trained elsewhere"):
    st.caption(
        "A Hugging Face peft adapter (LoRA, IA3, prefix or prompt tuning; task SEQ_CLS), a fine-tuned "
        "AutoModelForSequenceClassification folder, or a folder `python -m peftviz export` wrote. It is evaluated "
        "on the data chosen above (the preset's limit and max_length; for an export, its run's) and stored as a "
        "run every page reads."
    )
    if server.shared:
        st.info("Importing reads folders on this server and downloads from the hub: it is off on a shared server.")
    else:
        import_form(preset, dataset)

incomplete = [run for run in appkit.runs() if run.status == "incomplete" and run.metrics]
if incomplete:
    with st.expander(f"Resume a stopped run ({len(incomplete)})"):
        run = st.selectbox("Run", incomplete, format_func=appkit.run_label, key="train_resume_run")
        st.caption(f"Stopped after epoch {run.epochs_done} of {run.config.epochs}; it continues with its own settings.")
        if st.button("Resume", key="train_resume"):
            jobpanel.submit([], resume=[run])
jobpanel.job_panel()
