"""Train one method: pick the model, data, method and settings, and watch it train; resume a run; or
import a model trained elsewhere (a peft adapter, a Hugging Face classifier, a peftviz export)."""

import streamlit as st

from peftviz.app import appkit, jobpanel
from peftviz.data.builtin import BUILTIN
from peftviz.data.hub import HUB_DATASETS
from peftviz.data.loading import load_data
from peftviz.data.uploads import as_uploaded, store_upload
from peftviz.errors import DataError, PeftvizError
from peftviz.exchange.request import ImportRequest
from peftviz.exchange.sources import check_source
from peftviz.methods import DEFAULT_METHOD, METHODS, PEFT_PREFIX
from peftviz.methods.peft_tuner import tuner_types
from peftviz.modeling.backbones import check_model
from peftviz.paths import uploads_dir
from peftviz.run_config import PRESET_DATASET_SETTINGS, PRESETS, TrainConfig, over_seeds, preset_config
from peftviz.sweep.variants import check_start, starting_runs
from peftviz.training.engine import check_machine

SETTINGS = (
    "epochs",
    "learning_rate",
    "max_length",
    "batch_size",
    "limit",
    "seed",
    "schedule",
    "pooling",
    "precision",
    "gradient_checkpointing",
    "compile_layers",
    "local_attention",
)
LABELS = {
    "epochs": "Epochs",
    "learning_rate": "Learning rate",
    "max_length": "Tokens per document",
    "batch_size": "Batch size",
    "limit": "Examples per split",
    "seed": "First training seed",
    "schedule": "Learning-rate schedule",
    "pooling": "Pooling",
    "precision": "Precision",
    "gradient_checkpointing": "Gradient checkpointing",
    "compile_layers": "Compile the layers (torch.compile)",
    "local_attention": "Longformer windowed attention",
}

ANY_PEFT_TUNER = f"{PEFT_PREFIX}<TYPE>…"  # the method picker's last choice: any tuner of peft, by its type


def pick_method() -> str:
    """A registered method, or `peft:<TYPE>` for any tuner of Hugging Face peft, its type picked from peft's."""
    choices = [*METHODS, ANY_PEFT_TUNER]
    picked = st.selectbox(
        "Method",
        choices,
        index=choices.index(DEFAULT_METHOD),
        key="train_method",
        help=f"{ANY_PEFT_TUNER}: any tuner Hugging Face peft has, by its peft type",
    )
    if picked != ANY_PEFT_TUNER:
        return picked
    peft_type = st.selectbox(
        "peft tuner type",
        tuner_types(),
        key="train_peft_type",
        help="peft's tuner types; a type peft cannot apply to an encoder is refused in one line when it trains",
    )
    return f"{PEFT_PREFIX}{peft_type}"


appkit.page(
    "Train",
    "Train one classifier and store it as a run. The presets fill in sensible settings: `quick` is the offline "
    "MiniLM on bbc-news (a minute or two per method on a laptop CPU), `smoke` a tiny random model (seconds). "
    "Each setting's help text says what it does.",
)
server = jobpanel.policy()
store_runs = appkit.runs(usable_only=True)
store_models = sorted({run.config.model for run in store_runs})
if server.shared:
    st.info(
        "This server is shared: it trains on the built-in corpus or a file you upload (at most "
        f"{server.upload_limit // 2**20} MB), with one of its models: {', '.join(server.models(store_models))}. "
        f"Training jobs wait in line, at most {server.runs_per_visitor} runs of yours and {server.runs_queued} in all; "
        "you see your own."
    )

left, right = st.columns(2)
with left:
    preset = st.selectbox("Preset", list(PRESETS), index=list(PRESETS).index("quick"))
    method = pick_method()
    # a shared server offers no field a server path could be typed into
    sources = (
        ["built-in", "upload a file"] if server.shared else ["built-in or hub name", "upload a file", "local path"]
    )
    source = st.radio("Data", sources, horizontal=True)
    uploaded = None  # (where it is stored, the user's name for it): errors name the user's file
    if source in ("built-in", "built-in or hub name"):
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

try:
    defaults = preset_config(preset, method, **({"dataset": dataset} if dataset else {}))  # a dataset's own epochs
except PeftvizError as err:  # a peft type whose defaults peft refuses (X-LoRA's are a causal LM's), a bad path
    appkit.show_error(err)
    jobpanel.job_panel()
    st.stop()
with right:
    with st.expander("Training settings", expanded=True):
        st.caption(
            "A setting you change stays when you change the method; one you leave follows the method's "
            "own default (the learning rate). A preset fills in all of them anew."
        )
        # keyed by the preset, not the method: another method keeps these settings (`options_form` lets one left
        # at its default follow the new one). A preset with settings of its own per dataset (paper-long: 20
        # epochs on hyperpartisan) refills the form
        form = f"train.{preset}" + (f".{dataset}" if preset in PRESET_DATASET_SETTINGS else "")
        settings = appkit.options_form(TrainConfig, defaults.to_dict(), key=form, only=SETTINGS, labels=LABELS)
        n_seeds = int(
            st.number_input(
                "Number of seeds",
                1,
                10,
                1,
                help="Train once per training seed, counting up from the first training seed "
                "(first 4, two seeds: 4 and 5); the split stays the same, so the runs form a group that the Calibration "
                "page shows as a mean with an interval",
            )
        )
    with st.expander(f"{method} options", expanded=True):
        # an option naming another run is a choice among the store's runs that fit, never a typed path
        link = METHODS[method].start_option()
        links = {link: starting_runs(METHODS[method], store_runs, model)} if link else {}
        options = appkit.options_form(
            METHODS[method].config_class,
            defaults.method_options,
            key=method,
            links=links,
            labels=dict.fromkeys(links, "Start from run"),
        )
rate_note = METHODS[method].learning_rate_note(settings["learning_rate"])
if rate_note:
    st.warning(rate_note)  # a warning, not a refusal: it trains as asked

anew = st.checkbox(
    "Train anew even if a run with these settings and seed exists",
    key="train_anew",
    help="without it, a run the store holds complete is not trained again and a stopped one is resumed; "
    "with it, a new run is trained and marked as a repeat, which no group counts as a seed",
)
if st.button("Train", type="primary"):
    try:
        if not dataset:
            raise DataError("choose a dataset first")
        # on a shared server, decided from the names alone, before anything is opened or fetched
        server.check_dataset(dataset, BUILTIN, uploads_dir())
        server.check_model(model, store_models)
        # a value out of range raises a one-line ConfigError here, never falls back to a default
        config = preset_config(preset, method, model=model, dataset=dataset, method_options=options, **settings)
        check_start(config, store_runs)  # a starting run gone from the store, or of another model
        check_machine(config)  # a precision or device this machine lacks: here, on the page, not in the job
        check_model(config.model)  # a model folder's config.json and tokenizer, without loading its weights
        load_data(config.dataset, seed=config.data_seed, limit=config.limit)
        jobpanel.submit(over_seeds([config], list(range(config.seed, config.seed + n_seeds))), force=anew)
    except PeftvizError as err:  # bad settings, data or model
        appkit.show_error(as_uploaded(str(err), *uploaded) if uploaded else err)


def import_form(preset: str, dataset: str | None) -> None:
    """A model trained elsewhere, evaluated on the data chosen above and stored as a run (in the background)."""
    source = st.text_input("Folder or hub id", placeholder="./my-lora-adapter or owner/name", key="import_source")
    base = st.text_input("Base model (adapters only)", placeholder="default: the adapter's own", key="import_base")
    seed = st.number_input(
        "Training seed it was trained with",
        0,
        2**32 - 1,
        0,
        key="import_seed",
        help="imports that differ only in their seed form a group on the Calibration page",
    )
    if st.button("Import", key="train_import"):
        try:
            if not dataset:
                raise DataError("choose a dataset first")
            check_source(source.strip())  # as `peftviz import` finds it: a hub id while the hub is off, in the cache
            if base.strip():
                check_model(base.strip())  # the base an adapter goes on: a folder, or a hub id it can have
            load_data(dataset, limit=PRESETS[preset].get("limit"))
            settings = {"dataset": dataset, "seed": int(seed)}
            jobpanel.submit([], imports=[ImportRequest(source.strip(), settings, preset, base.strip() or None)])
        except PeftvizError as err:
            appkit.show_error(err)


with st.expander("Import a model trained elsewhere"):
    st.caption(
        "A Hugging Face peft adapter (any tuner peft applies to an encoder, LoRA to VeRA and beyond, or prefix, "
        "prompt and P-tuning; task SEQ_CLS), a fine-tuned "
        "AutoModelForSequenceClassification folder, or a folder `python -m peftviz export` wrote. It is evaluated "
        "on the data chosen above (the preset's limit and max_length; for an export, its run's) and stored as a "
        "run every page reads."
    )
    if server.shared:
        st.info("Importing reads folders on this server and downloads from the hub: it is off on a shared server.")
    else:
        import_form(preset, dataset)

incomplete = [run for run in appkit.runs() if run.status == "incomplete" and run.metrics and run.trained_here]
if incomplete:
    with st.expander(f"Resume a stopped run ({len(incomplete)})"):
        run = st.selectbox("Run", incomplete, format_func=appkit.run_label, key="train_resume_run")
        st.caption(f"Stopped after epoch {run.epochs_done} of {run.config.epochs}; it continues with its own settings.")
        if st.button("Resume", key="train_resume"):
            jobpanel.submit([], resume=[run])
jobpanel.job_panel()
