"""Export and import (peftviz.exchange), checked against peft and transformers themselves.

- Round trip: a peftviz run of each method peft has (EXPORT_CASES), on a tiny BERT, RoBERTa and
  (all but prompt learning) Longformer (random weights, saved as model folders), its adapter moved
  far from its start, exported; `PeftModel.from_pretrained` on the architecture's
  AutoModelForSequenceClassification gives peftviz's logits; imported back, the stored test
  predictions are the run's model's.
- An adapter trained by peft itself (a few steps here) and a classifier fine-tuned with
  transformers, imported: the stored predictions are what peft / transformers compute directly.
- Which peftviz method reads an adapter of a peft type several share (DISPATCH_CASES).
- Bad sources: one line each, and no run.
- What a new user runs: the README's train, export and import, then the Calibration page; the
  Train page's import; the Attention page on imported prefix and prompt tuning.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import (
    AdaLoraConfig,
    BOFTConfig,
    FourierFTConfig,
    HRAConfig,
    IA3Config,
    LNTuningConfig,
    LoHaConfig,
    LoKrConfig,
    LoraConfig,
    OFTConfig,
    PeftModel,
    PrefixTuningConfig,
    PromptEncoderConfig,
    PromptTuningConfig,
    RandLoraConfig,
    VBLoRAConfig,
    VeraConfig,
    get_peft_model,
)
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, BertConfig, RobertaConfig

from peftviz.classifier import build_classifier
from peftviz.data.loading import load_data
from peftviz.errors import PeftvizError
from peftviz.exchange.export import export_run
from peftviz.exchange.imports import adapter_method, import_model
from peftviz.exchange.request import ImportRequest
from peftviz.methods import METHODS
from peftviz.modeling.backbones import load_encoder, tiny_encoder
from peftviz.paths import minilm_path
from peftviz.run_config import preset_config
from peftviz.store.runs import list_runs
from peftviz.training.inference import load_trained, make_loader, predict, tokenize
from peftviz.training.trainer import seed_everything, train
from tests.support.helpers import plotly_array

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster
LIMIT, MAX_LENGTH = 40, 24  # documents per split, tokens per document: seconds per case
EXPORT_CASES = [  # (method, options): each method peft has, with the options that make it exportable
    ("lora", {"r": 4}),
    ("ia3", {}),
    ("prefix-tuning", {"prefix_length": 4, "layout": "peft"}),
    ("prompt-tuning", {"prompt_length": 3, "layout": "peft"}),
    ("dora", {"r": 4}),
    ("rslora", {"r": 4}),
    ("pissa", {"r": 4}),  # W_res = W - B A at the start: peft redoes it from the base when it loads the adapter
    ("olora", {"r": 4}),
    ("lora-plus", {"r": 4}),
    # ranks allocated over the run's few steps (from 4 to 2 per map on average): peft saves the kept triplets only
    ("adalora", {"init_r": 4, "target_r": 2, "tinit": 0, "tfinal": 0, "deltaT": 1}),
    ("vera", {"r": 4}),
    ("loha", {"r": 4}),
    ("lokr", {"r": 4}),
    ("oft", {}),
    ("boft", {}),
    ("hra", {}),
    ("fourierft", {}),
    ("vblora", {}),
    ("ln-tuning", {}),
    ("p-tuning", {"prompt_length": 3, "encoder_hidden_size": 16, "layout": "peft"}),
    ("peft:RANDLORA", {"r": 4}),  # a tuner with no named method
]
IMPORTED_AS = {"p-tuning": "prompt-tuning"}  # peft saves the prompt p-tuning's encoder made, not the encoder
QV = ["query", "value"]
PEFT_CONFIGS = {  # adapters trained by peft itself, by the peftviz method that imports them
    "lora": lambda: LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=QV),
    "ia3": lambda: IA3Config(
        task_type="SEQ_CLS", target_modules=["key", "value", "output.dense"], feedforward_modules=["output.dense"]
    ),  # peft's BERT default; it has none for the Longformer
    "prefix-tuning": lambda: PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=4),
    "prompt-tuning": lambda: PromptTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=3),
    "dora": lambda: LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=QV, use_dora=True),
    "rslora": lambda: LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=QV, use_rslora=True),
    "pissa": lambda: LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=QV, init_lora_weights="pissa"),
    "olora": lambda: LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=QV, init_lora_weights="olora"),
    "adalora": lambda: AdaLoraConfig(
        task_type="SEQ_CLS", init_r=4, target_r=2, tinit=0, tfinal=0, deltaT=1, total_step=3, target_modules=QV
    ),
    "vera": lambda: VeraConfig(task_type="SEQ_CLS", r=4, target_modules=QV),
    "loha": lambda: LoHaConfig(task_type="SEQ_CLS", r=4, alpha=4, target_modules=QV),
    "lokr": lambda: LoKrConfig(task_type="SEQ_CLS", r=4, alpha=4, target_modules=QV),
    "oft": lambda: OFTConfig(task_type="SEQ_CLS", r=0, oft_block_size=4, target_modules=QV),
    "boft": lambda: BOFTConfig(task_type="SEQ_CLS", boft_block_size=4, target_modules=QV),
    "hra": lambda: HRAConfig(task_type="SEQ_CLS", r=4, target_modules=QV),
    "fourierft": lambda: FourierFTConfig(task_type="SEQ_CLS", n_frequency=16, target_modules=QV),
    "vblora": lambda: VBLoRAConfig(
        task_type="SEQ_CLS", r=4, num_vectors=16, vector_length=8, topk=2, target_modules=QV
    ),
    "ln-tuning": lambda: LNTuningConfig(task_type="SEQ_CLS", target_modules=["LayerNorm"]),
    # a P-tuning adapter holds the prompt its MLP made: read as prompt tuning of that prompt
    "prompt-tuning (p-tuning)": lambda: PromptEncoderConfig(
        task_type="SEQ_CLS", num_virtual_tokens=3, encoder_hidden_size=16
    ),
    "peft:RANDLORA": lambda: RandLoraConfig(task_type="SEQ_CLS", r=4, target_modules=QV),  # no named method
}
NO_HOLDER = (
    "no peftviz method holds this LORA adapter: the adapter sets {}, which peftviz's peft:LORA has no option for"
)
CONFIGS = {"bert": BertConfig, "roberta": RobertaConfig}
FAMILIES = ["bert", "roberta", "longformer"]
PROMPT_LEARNING = ("prefix-tuning", "prompt-tuning", "p-tuning")  # peft runs them on BERT and RoBERTa only
# the Longformer's head reads <s>, a global token, whose attention uses the *_global projections: peft's default
# targets (BERT's query, value) reach it only through the other tokens, and barely move its logits
LONGFORMER_TARGETS = "query,value,query_global,value_global"
FIRST_FOUR = ("lora", "ia3", "prefix-tuning", "prompt-tuning")  # in the fast tier; the others in the slow one


def family_cases(methods) -> list:
    """pytest params (family, method, ...) of each method on each family where peft runs it; the first four
    methods are in the fast tier on every family, the others in the slow tier (a second or two each: trained,
    exported, loaded in peft and imported back)."""
    cases = []
    for family in FAMILIES:
        for case in methods:
            method = case[0] if isinstance(case, tuple) else case
            if family == "longformer" and method.split(" ")[0] in PROMPT_LEARNING:
                continue
            slow = method not in FIRST_FOUR
            values = case if isinstance(case, tuple) else (case,)
            cases.append(pytest.param(family, *values, id=f"{family}-{method}", marks=[pytest.mark.slow] * slow))
    return cases


def base_folder(folder, family: str, hidden: int = 32):
    """A tiny random encoder saved as a model folder (with BERT's pooler), tokenised with MiniLM's tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    if family == "longformer":  # its attention window and positions as peftviz's tiny Longformer has them
        encoder = tiny_encoder("longformer", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    else:
        config = CONFIGS[family](
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=2 * hidden,
            pad_token_id=tokenizer.pad_token_id,
            max_position_embeddings=64,
        )
        encoder = AutoModel.from_config(config)
    encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def base_of(tmp_path_factory):
    """family -> a tiny random base folder of that family, made once per module."""
    made = {}

    def base(family: str) -> str:
        if family not in made:
            made[family] = base_folder(tmp_path_factory.mktemp(f"base-{family}"), family)
        return made[family]

    return base


def smoke_run(store, method: str, model: str, **options):
    config = preset_config(
        "smoke", method, model=model, limit=LIMIT, max_length=MAX_LENGTH, epochs=1, method_options=options
    )
    return train(config, store)


def split_loader(run_or_config, tokenizer):
    """The test split as the run evaluated it."""
    config = getattr(run_or_config, "config", run_or_config)
    data = load_data(config.dataset, seed=config.data_seed, limit=config.limit)
    examples = tokenize(data.splits["test"], tokenizer, config.max_length)
    return data, make_loader(examples, config.batch_size, tokenizer.pad_token_id)


def logits_of(model, loader, peft: bool) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat(
            [
                (
                    model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
                    if peft
                    else model(b["input_ids"], b["attention_mask"])
                ).logits
                for b in loader
            ]
        )


def n_runs(store) -> int:
    return len(list_runs(store)) if store.exists() else 0


# ---------------------------------------------------------------- round trip


def perturb_stored_params(run, scale: float = 0.5) -> None:
    """Move each non-zero entry of the run's stored method tensors (not the head's) by N(0, scale²), so that the
    adapter is far from its start: a few smoke steps on a tiny random encoder move the logits by 1e-4 or less,
    too little for a 1e-5 comparison to see a tensor lost on the way. Zeros stay 0 (AdaLoRA's pruned λ, maps
    no gradient reaches)."""
    with safe_open(str(run.params_path), framework="pt") as stored:
        metadata = stored.metadata()  # the epoch the run's summary expects
    params, noise = run.params(), torch.Generator().manual_seed(0)
    for name, tensor in params.items():
        if not name.startswith("head."):
            params[name] = tensor + (tensor != 0) * scale * torch.randn(tensor.shape, generator=noise)
    save_file(params, str(run.params_path), metadata=metadata)


def untrained(run) -> dict[str, torch.Tensor]:
    """The trainable tensors of `run`'s model as the trainer builds it (its seed, encoder and method), before any
    step: their start (a tensor drawn at random may come from another draw of the same law)."""
    config = run.config
    seed_everything(config.seed)
    encoder, _ = load_encoder(config.model)
    model = build_classifier(
        encoder, config.method, len(run.label_names), config.setting_options, config.pooling, config.head_dropout
    )
    return model.trainable_state_dict()


@pytest.mark.parametrize("family, method, options", family_cases(EXPORT_CASES))
def test_export_loads_in_peft_with_the_same_logits_and_imports_back(base_of, family, method, options, tmp_path):
    base = base_of(family)
    store = tmp_path / "runs"
    if family == "longformer" and METHODS[method].config_class().to_dict().get("target_modules") == "peft-default":
        options = {**options, "target_modules": LONGFORMER_TARGETS}
    run = smoke_run(store, method, base, **options)
    perturb_stored_params(run)
    exported = export_run(run, tmp_path / "exported")
    assert {"adapter_config.json", "adapter_model.safetensors", "peftviz.json", "README.md"} <= {
        p.name for p in exported.iterdir()
    }
    assert not list(exported.glob("*.bin"))
    saved = json.loads((exported / "adapter_config.json").read_text())["modules_to_save"]
    assert len(saved) == len(set(saved)) and "classifier" in saved, saved  # each module once, the head among them
    assert "PeftModel.from_pretrained" in (exported / "README.md").read_text()  # a folder base: peft's recipe works
    ours, tokenizer = load_trained(run, device="cpu")
    _, loader = split_loader(run, tokenizer)
    # the adapter is not at its start: with the method's tensors put back as training started them (the head
    # trained), the logits differ, so that the comparison below sees what the adapter does
    at_start, _ = load_trained(run, device="cpu")
    at_start.load_state_dict({k: v for k, v in untrained(run).items() if not k.startswith("head.")}, strict=False)
    moved = (logits_of(ours, loader, peft=False) - logits_of(at_start, loader, peft=False)).abs().max()
    assert moved > 1e-3, f"{method}: the adapter changes the logits by {moved} from its start"

    classifier = AutoModelForSequenceClassification.from_pretrained(base, num_labels=len(run.label_names))
    theirs = PeftModel.from_pretrained(classifier, exported).eval()
    gap = (logits_of(ours, loader, peft=False) - logits_of(theirs, loader, peft=True)).abs().max()
    assert gap <= 1e-5, f"{method} on {base}: max |Δ logit| {gap}"

    imported = import_model(ImportRequest(str(exported)), store)
    assert imported.imported["kind"] == "peft-adapter" and imported.imported["labels"] == "by name"
    assert imported.config.method == IMPORTED_AS.get(method, method) and imported.config.model == base
    original, again = predict(ours, loader, torch.device("cpu")), imported.predictions("test")  # the run's model's
    np.testing.assert_array_equal(again[1], original[1])
    assert np.abs(again[0] - original[0]).max() <= 1e-6


def test_peftviz_methods_export_as_their_own_folder_and_import_back(tmp_path):
    store = tmp_path / "runs"
    run = smoke_run(store, "prefix-propagation", "tiny-bert", prefix_length=4)
    exported = export_run(run, tmp_path / "exported")
    assert {p.name for p in exported.iterdir()} == {"params.safetensors", "peftviz.json", "README.md"}
    umask = os.umask(0)
    os.umask(umask)
    assert {oct(p.stat().st_mode & 0o777) for p in exported.iterdir()} == {oct(0o666 & ~umask)}  # not 0600
    card = (exported / "README.md").read_text()
    assert "prefix-propagation" in card and "95% interval" in card and "| ECE (10 equal-width bins) |" in card
    test_ece = run.summary["test"]["ece"]
    assert f"| ECE (10 equal-width bins) | {test_ece:.4f} |" in card  # the run's own number, with its interval

    imported = import_model(ImportRequest(str(exported)), store)
    assert imported.imported["kind"] == "peftviz" and imported.config.method == "prefix-propagation"
    np.testing.assert_array_equal(imported.predictions("test")[0], run.predictions("test")[0])


class Collected(logging.Handler):
    """The messages of the warning log records it hears."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def tiny_lora_export(tmp_path_factory):
    """A LoRA run on the built-in tiny-bert, exported under umask 002: (run, folder, every warning and warning
    log line the export emitted). transformers' logger does not propagate to the root, so both are heard."""
    folder = tmp_path_factory.mktemp("tiny-lora")
    run = smoke_run(folder / "runs", "lora", "tiny-bert")
    handler, loggers = Collected(), [logging.getLogger(), logging.getLogger("transformers")]
    for logger in loggers:
        logger.addHandler(handler)
    umask = os.umask(0o002)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every warning, also those a filter would show once or never
            exported = export_run(run, folder / "exported")
    finally:
        os.umask(umask)
        for logger in loggers:
            logger.removeHandler(handler)
    return run, exported, [str(w.message) for w in caught] + handler.messages


def test_an_export_s_files_take_the_umask_s_mode_not_0600(tiny_lora_export):
    _, exported, _ = tiny_lora_export
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in exported.iterdir()}
    assert modes == dict.fromkeys(
        ["README.md", "adapter_config.json", "adapter_model.safetensors", "peftviz.json"], oct(0o664)
    )


def test_an_export_warns_nothing(tiny_lora_export):
    """peft warned that the base was "renamed from 'tiny-bert' to 'None'" (a name given before get_peft_model)."""
    _, _, messages = tiny_lora_export
    assert messages == []


def test_the_adapter_config_lists_bert_s_pooler_and_classifier_once_each(tiny_lora_export):
    _, exported, _ = tiny_lora_export
    saved = json.loads((exported / "adapter_config.json").read_text())["modules_to_save"]
    assert sorted(saved) == sorted(set(saved)) and {"classifier", "pooler"} <= set(saved), saved


def test_the_card_of_a_built_in_encoder_s_run_loads_it_through_peftviz_only(tiny_lora_export, tmp_path):
    """peft cannot load a base named "tiny-bert": the card gives peftviz's import, which works."""
    run, exported, _ = tiny_lora_export
    card = (exported / "README.md").read_text()
    assert "PeftModel.from_pretrained" not in card and "AutoModelForSequenceClassification" not in card
    assert "`tiny-bert`, an encoder that exists only inside peftviz" in card
    assert "`python -m peftviz import THIS_FOLDER --dataset D`" in card
    imported = import_model(ImportRequest(str(exported)), tmp_path / "runs")
    np.testing.assert_array_equal(imported.predictions("test")[1], run.predictions("test")[1])


def test_a_paper_layout_run_is_not_exported_as_a_peft_adapter(tmp_path):
    run = smoke_run(tmp_path / "runs", "prefix-tuning", "tiny-bert", prefix_length=4)
    with pytest.raises(PeftvizError, match="layout='paper' has no exact peft form: train with layout=peft"):
        export_run(run, tmp_path / "exported")
    assert not (tmp_path / "exported").exists() and not list(tmp_path.glob(".exported*"))


def test_mean_pooling_is_not_exported_and_a_folder_is_not_overwritten(tmp_path):
    config = preset_config("smoke", "lora", limit=LIMIT, max_length=MAX_LENGTH, epochs=1, pooling="mean")
    run = train(config, tmp_path / "runs")
    with pytest.raises(PeftvizError, match="pools the mean of the text"):
        export_run(run, tmp_path / "exported")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(PeftvizError, match="exists and is not an empty folder"):
        export_run(run, tmp_path / "taken")
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------- models trained elsewhere


BBC = ["business", "entertainment", "politics", "sports", "tech"]
SHUFFLED = ["tech", "sports", "business", "politics", "entertainment"]  # the model's class order differs from peftviz's


def few_steps(model, tokenizer, steps: int = 3) -> None:
    """A few optimiser steps on BBC documents, so that every trained tensor has moved from its start; an
    AdaLoRA model allocates its ranks after each step, as peft's documentation has its users do."""
    data = load_data("bbc-news", limit=LIMIT)
    batch = tokenizer(
        data.splits["train"]["text"][:8], truncation=True, max_length=MAX_LENGTH, padding=True, return_tensors="pt"
    )
    labels = torch.tensor(data.splits["train"]["label"][:8])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    model.train()
    for step in range(1, steps + 1):
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if hasattr(model.base_model, "update_and_allocate"):
            model.base_model.update_and_allocate(step)
    model.eval()


def expected_probs(model, base_or_folder: str, names: list[str]) -> np.ndarray:
    """What the library computes on the import's test split, its classes put in peftviz's order."""
    tokenizer = AutoTokenizer.from_pretrained(base_or_folder)
    config = preset_config("quick", "lora", limit=LIMIT, max_length=MAX_LENGTH)
    data, loader = split_loader(config, tokenizer)
    logits = logits_of(model, loader, peft=True)[:, [names.index(name) for name in data.label_names]]
    return logits.softmax(-1).numpy()


@pytest.mark.parametrize("family, method", family_cases(list(PEFT_CONFIGS)))
def test_an_adapter_trained_by_peft_imports_with_peft_s_predictions(base_of, family, method, tmp_path):
    base = base_of(family)
    adapter = tmp_path / "adapter"
    model = peft_trained_adapter(adapter, base, method)

    run = import_model(ImportRequest(str(adapter), {"limit": LIMIT, "max_length": MAX_LENGTH}), tmp_path / "runs")
    assert run.imported["labels"] == "by name" and run.config.method == method.split(" ")[0]
    assert set(run.imported["files"]) == {"adapter_config.json", "adapter_model.safetensors", "config.json"}
    probs, _ = run.predictions("test")
    gap = np.abs(probs - expected_probs(model, base, SHUFFLED)).max()
    assert gap <= 1e-5, f"{method}: max |Δ probability| {gap}"


def peft_trained_adapter(folder, base: str, method: str):
    """An adapter of `method` trained a few steps by peft on `base`, its classes named in SHUFFLED's order."""
    torch.manual_seed(0)
    classifier = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=5, id2label=dict(enumerate(SHUFFLED)), label2id={n: i for i, n in enumerate(SHUFFLED)}
    )
    model = get_peft_model(classifier, PEFT_CONFIGS[method]())
    model.peft_config["default"].base_model_name_or_path = base
    few_steps(model, AutoTokenizer.from_pretrained(base))
    with torch.no_grad():  # far from its start, as the export's round trip does (zeros stay: AdaLoRA's pruned λ)
        for name, tensor in model.named_parameters():
            if tensor.requires_grad and "modules_to_save" not in name:
                tensor += (tensor != 0) * 0.05 * torch.randn(tensor.shape)
    model.save_pretrained(folder)
    classifier.config.save_pretrained(folder)  # its id2label: the classes by name
    return model


def test_the_attention_page_draws_the_prefix_of_imported_prefix_and_prompt_tuning(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.app.test_page_attention import PAGE, assert_clean, select_run
    from tests.support.helpers import charts

    base, store = base_folder(tmp_path / "base", "bert"), tmp_path / "runs"
    for method, length in (("prefix-tuning", 4), ("prompt-tuning", 3)):
        peft_trained_adapter(tmp_path / method, base, method)
        settings = {"limit": LIMIT, "max_length": MAX_LENGTH, "label": method}
        import_model(ImportRequest(str(tmp_path / method), settings), store)
        monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
        page = AppTest.from_file(PAGE, default_timeout=120).run()
        select_run(page, method)
        assert_clean(page)
        shown = charts(page)
        assert {"grid", "tokens"} <= set(shown)  # the attention to the prefix, per layer and head, and per token
        assert plotly_array(shown["grid"]["data"][0]["z"]).shape == (2, 4)  # 2 layers, 4 heads
        assert shown["tokens"]["layout"]["xaxis"]["ticktext"][:length] == [f"P{i + 1}" for i in range(length)]


@pytest.mark.parametrize("family", list(CONFIGS))
def test_a_fine_tuned_classifier_imports_with_transformers_predictions(family, tmp_path):
    base = base_folder(tmp_path / "base", family)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=5, id2label=dict(enumerate(SHUFFLED)), label2id={n: i for i, n in enumerate(SHUFFLED)}
    )
    tokenizer = AutoTokenizer.from_pretrained(base)
    few_steps(model, tokenizer)
    folder = tmp_path / "classifier"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    run = import_model(ImportRequest(str(folder), {"limit": LIMIT, "max_length": MAX_LENGTH}), tmp_path / "runs")
    assert run.imported["kind"] == "hf-classifier" and run.config.method == "fine-tuning"
    gap = np.abs(run.predictions("test")[0] - expected_probs(model, str(folder), SHUFFLED)).max()
    assert gap <= 1e-5, f"max |Δ probability| {gap}"


# ---------------------------------------------------------------- bad sources


@pytest.fixture(scope="module")
def lora_adapter(tmp_path_factory):
    """A peft LoRA adapter (task SEQ_CLS) on a tiny BERT folder, with the BBC labels by name."""
    folder = tmp_path_factory.mktemp("adapter")
    base = base_folder(folder / "base", "bert")
    classifier = AutoModelForSequenceClassification.from_pretrained(base, num_labels=5, id2label=dict(enumerate(BBC)))
    model = get_peft_model(classifier, PEFT_CONFIGS["lora"]())
    model.save_pretrained(folder / "adapter")
    classifier.config.save_pretrained(folder / "adapter")
    config = json.loads((folder / "adapter" / "adapter_config.json").read_text())
    (folder / "adapter" / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return folder / "adapter"


def changed_copy(adapter, tmp_path, config_changes=None, drop=(), add=None):
    folder = tmp_path / "changed"
    shutil.copytree(adapter, folder)
    if config_changes:
        config = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**config, **config_changes}))
    for name in drop:
        (folder / name).unlink()
    for name, content in (add or {}).items():
        (folder / name).write_bytes(content)
    return folder


BAD_SOURCES = {  # id -> (how to make the source from the adapter and tmp_path, extra arguments, the error)
    "no-model": (
        lambda adapter, tmp: (tmp.mkdir(parents=True), tmp)[1],
        {},
        r"holds no peft adapter \(adapter_config.json\), Hugging Face model \(config.json\) or peftviz export",
    ),
    "hub-offline": (
        lambda adapter, tmp: "someone/their-lora-adapter",
        {},
        "cannot download someone/their-lora-adapter from the Hugging Face hub: ",
    ),
    "other-task": (
        lambda adapter, tmp: changed_copy(adapter, tmp, {"task_type": "CAUSAL_LM"}),
        {},
        "is a peft adapter for task CAUSAL_LM; peftviz imports sequence-classification adapters",
    ),
    "other-method": (
        lambda adapter, tmp: changed_copy(adapter, tmp, {"peft_type": "NOT_A_TUNER"}),
        {},
        (
            r"is a NOT_A_TUNER adapter, which neither a peftviz method \(.*LORA.*\) nor any tuner of "
            r"peft \(peft:<TYPE>\) holds"
        ),
    ),
    "a-feature-peftviz-lacks": (
        lambda adapter, tmp: changed_copy(adapter, tmp, {"layers_to_transform": [0]}),
        {},
        NO_HOLDER.format(r"layers_to_transform=\[0\]"),
    ),
    "base-mismatch": (
        lambda adapter, tmp: adapter,
        {"base": "wider"},
        r"does not fit base .*: .*lora_A.weight is \(4, 32\) in the adapter, \(4, 64\) on",
    ),
    "base-without-pooler": (
        lambda adapter, tmp: adapter,
        {"model": "tiny-bert"},
        "leaves BERT's pooler, which its classifier reads, to the base, and tiny-bert has no pooler",
    ),
    "label-mismatch": (
        lambda adapter, tmp: adapter,
        {"dataset": "labels"},
        "labels do not match: .* has business, entertainment, politics, sports, tech; .* has cold, hot",
    ),
    "unnamed-class-count": (
        lambda adapter, tmp: three_class_adapter(tmp),
        {},
        "labels do not match: .* has 3 unnamed classes, bbc-news has 5",
    ),
    "damaged-adapter": (
        lambda adapter, tmp: changed_copy(adapter, tmp, add={"adapter_model.safetensors": b"\xff" * 99}),
        {},
        "cannot read adapter_model.safetensors: .*no valid safetensors header",
    ),
    "pickled-adapter": (
        lambda adapter, tmp: changed_copy(
            adapter, tmp, drop=["adapter_model.safetensors"], add={"adapter_model.bin": b"pickle"}
        ),
        {},
        r"has only pickled adapter weights \(adapter_model.bin\), which peftviz does not load",
    ),
    "pickled-model": (
        lambda adapter, tmp: pickled_classifier(tmp),
        {},
        r"has no safetensors weights, only pickled PyTorch ones \(pytorch_model.bin\)",
    ),
}


def saved_config(config, folder: Path) -> dict:
    """A peft config as its adapter_config.json holds it (written by peft's own save_pretrained)."""
    config.save_pretrained(str(folder))
    return json.loads((folder / "adapter_config.json").read_text())


LORA = {"task_type": "SEQ_CLS", "r": 4, "target_modules": QV}
DISPATCH_CASES = {  # id -> (peft config, the method peftviz.json names or None, the method it imports as / the error)
    "plain-lora": (LoraConfig(**LORA), None, "lora"),
    "gaussian-start": (LoraConfig(**LORA, init_lora_weights="gaussian"), None, "lora"),  # only how A, B start
    "dora": (LoraConfig(**LORA, use_dora=True), None, "dora"),
    "rslora": (LoraConfig(**LORA, use_rslora=True), None, "rslora"),
    "dora-with-rslora": (LoraConfig(**LORA, use_dora=True, use_rslora=True), None, "dora"),  # use_rslora an option
    "pissa": (LoraConfig(**LORA, init_lora_weights="pissa"), None, "pissa"),
    "olora": (LoraConfig(**LORA, init_lora_weights="olora"), None, "olora"),
    "lora-biases": (LoraConfig(**LORA, lora_bias=True), None, "peft:LORA"),  # lora refuses, peft's LoRA has it
    "other-targets": (LoraConfig(**{**LORA, "target_modules": ["key"]}), None, "peft:LORA"),
    "exported-lora-plus": (LoraConfig(**LORA), "lora-plus", "lora-plus"),  # an adapter cannot tell, its export can
    "exported-peft-lora": (LoraConfig(**LORA), "peft:LORA", "peft:LORA"),  # not lora, which holds it too
    "adalora-with-ranks": (
        AdaLoraConfig(
            task_type="SEQ_CLS",
            init_r=4,
            total_step=3,
            target_modules=QV,
            rank_pattern={"bert.encoder.layer.0.attention.self.query.lora_E": [True] * 4},
        ),
        None,
        "adalora",
    ),
    "p-tuning": (PromptEncoderConfig(task_type="SEQ_CLS", num_virtual_tokens=3), None, "prompt-tuning"),
    "exported-p-tuning": (PromptEncoderConfig(task_type="SEQ_CLS", num_virtual_tokens=3), "p-tuning", "prompt-tuning"),
    "randlora": (RandLoraConfig(**LORA), None, "peft:RANDLORA"),  # no named method: peft's tuner
    "per-layer-ranks": (
        LoraConfig(**LORA, rank_pattern={"query": 8}),
        None,
        NO_HOLDER.format("rank_pattern={'query': 8}"),
    ),
    "randomised-pissa": (
        LoraConfig(**LORA, init_lora_weights="pissa_niter_4"),
        None,
        NO_HOLDER.format("init_lora_weights='pissa_niter_4'"),
    ),
}


@pytest.mark.parametrize("case", list(DISPATCH_CASES))
def test_an_adapter_is_read_by_the_most_specific_method_that_holds_it(case, tmp_path):
    """Several methods share a peft type (LORA: lora, dora, rslora, pissa, olora, lora-plus): an adapter goes to
    the named method whose fixed settings it has, else to peft's tuner of its type, else one line says why not."""
    config, exported_as, expected = DISPATCH_CASES[case]
    adapter = saved_config(config, tmp_path)
    if expected in METHODS:
        method, options = adapter_method(adapter, "ADAPTER", exported_as)
        assert method.name == expected
        assert options.get("prompt_length", 3) == adapter.get("num_virtual_tokens", 3)
        differ = {k: v for k, v in options.items() if k in adapter and k != "target_modules" and adapter[k] != v}
        assert not differ, differ  # every option the adapter sets is the adapter's (dora-with-rslora: use_rslora)
    else:
        with pytest.raises(PeftvizError) as refused:
            adapter_method(adapter, "ADAPTER", exported_as)
        assert str(refused.value) == f"ADAPTER: {expected}"


def test_an_adalora_adapter_holds_only_the_triplets_it_kept_both_ways(base_of, tmp_path):
    """peft saves the AdaLoRA triplets a model kept (rank_pattern; λ = 0 for the others) and resizes its layers
    to them when it loads. An export says which λ of the run are not 0, and peft's own adapter (the import
    case above) prunes as well, so both directions pass through resized tensors."""
    options = dict(EXPORT_CASES)["adalora"]
    run = smoke_run(tmp_path / "runs", "adalora", base_of("bert"), **options)
    exported = export_run(run, tmp_path / "exported")
    pattern = json.loads((exported / "adapter_config.json").read_text())["rank_pattern"]
    saved = load_file(str(exported / "adapter_model.safetensors"))
    lambdas = {name: p for name, p in run.params().items() if name.endswith(".lora_E.default")}
    assert len(pattern) == len(lambdas) == 4  # query and value of 2 layers
    for key, kept in pattern.items():
        assert kept == (lambdas[f"encoder.{key.removeprefix('bert.')}.default"] != 0).view(-1).tolist()
        assert tuple(saved[f"base_model.model.{key}"].shape) == (sum(kept), 1)
    ranks = run.summary["method"]["adalora_kept_ranks"]
    assert {f"bert.{name}.lora_E": rank for name, rank in ranks.items()} == {k: sum(v) for k, v in pattern.items()}
    assert 0 < sum(ranks.values()) < 4 * 4  # some triplets pruned, not all

    peft_trained_adapter(tmp_path / "peft", base_of("bert"), "adalora")
    pattern = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())["rank_pattern"]
    assert 0 < sum(map(sum, pattern.values())) < 4 * 4


def three_class_adapter(tmp_path):
    """A LoRA adapter whose head has 3 rows and whose folder names no classes (no config.json)."""
    base = base_folder(tmp_path / "base", "bert")
    model = get_peft_model(
        AutoModelForSequenceClassification.from_pretrained(base, num_labels=3), PEFT_CONFIGS["lora"]()
    )
    model.peft_config["default"].base_model_name_or_path = base
    model.save_pretrained(tmp_path / "adapter")
    return tmp_path / "adapter"


def test_an_adapter_that_names_no_classes_is_matched_by_position(lora_adapter, tmp_path):
    source = changed_copy(lora_adapter, tmp_path, drop=["config.json"])
    run = import_model(ImportRequest(str(source), {"limit": LIMIT, "max_length": MAX_LENGTH}), tmp_path / "runs")
    assert run.imported["labels"] == "by position" and run.label_names == BBC


def pickled_classifier(tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir(parents=True)
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        architectures=["BertForSequenceClassification"],
    )
    config.save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    (folder / "pytorch_model.bin").write_bytes(b"never unpickled")
    return folder


@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_a_bad_source_gets_one_line_and_no_run(case, lora_adapter, tmp_path):
    make, extra, message = BAD_SOURCES[case]
    source = make(lora_adapter, tmp_path / "source")
    overrides = {"limit": LIMIT, "max_length": MAX_LENGTH}
    if extra.get("dataset") == "labels":
        csv = tmp_path / "weather.csv"
        csv.write_text("text,label\n" + "".join(f"day {i} was warm,{'hot' if i % 2 else 'cold'}\n" for i in range(60)))
        overrides["dataset"] = str(csv)
    base = base_folder(tmp_path / "wider", "bert", hidden=64) if extra.get("base") else extra.get("model")
    store = tmp_path / "runs"
    with pytest.raises(PeftvizError, match=message) as caught:
        import_model(ImportRequest(str(source), overrides, base=base), store)
    assert "\n" not in str(caught.value)
    assert n_runs(store) == 0


# ---------------------------------------------------------------- what a new user runs


def test_train_export_import_and_the_calibration_page_shows_both_with_equal_numbers(tmp_path, monkeypatch):
    """The README's commands: a smoke LoRA run, exported, imported back; the Calibration page (AppTest)."""
    from streamlit.testing.v1 import AppTest

    from peftviz.cli import main
    from tests.app.test_page_calibration import PAGE, table

    store = tmp_path / "runs"
    assert main(["train", "--preset", "smoke", "--method", "lora", "--runs-dir", str(store)]) == 0
    (trained,) = list_runs(store)
    assert main(["export", trained.name, str(tmp_path / "lora-adapter"), "--runs-dir", str(store)]) == 0
    assert main(["import", str(tmp_path / "lora-adapter"), "--runs-dir", str(store)]) == 0
    imported = next(run for run in list_runs(store) if run.imported)
    assert imported.config.limit == trained.config.limit == 120  # the export's data settings by default

    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    page = AppTest.from_file(PAGE, default_timeout=300).run()
    assert not page.exception and not page.error
    summary = table(page, "unit").set_index("unit")
    assert list(summary.index) == ["lora", "lora (imported)"]
    numbers = summary.drop(columns=["seeds"])
    assert (numbers.loc["lora"] == numbers.loc["lora (imported)"]).all(), numbers  # every metric, every interval


@pytest.mark.slow
def test_the_train_page_imports_a_model_in_the_background_and_says_what_is_wrong(tmp_path, empty_store):
    from streamlit.testing.v1 import AppTest

    from peftviz.app import jobpanel
    from tests.support.job_helpers import wait_until_idle

    run = smoke_run(tmp_path / "elsewhere", "lora", "tiny-bert")
    exported = export_run(run, tmp_path / "adapter")
    page = AppTest.from_file("../../pages/1_Train.py", default_timeout=60).run()
    page.selectbox[0].set_value("smoke").run()
    page.text_input(key="import_source").set_value(str(tmp_path / "nowhere")).run()
    page.button(key="train_import").click().run()
    assert not page.exception and len(page.error) == 1 and "no folder" in page.error[0].value

    page.text_input(key="import_source").set_value(str(exported)).run()
    page.number_input(key="import_seed").set_value(3).run()
    page.button(key="train_import").click().run()
    assert not page.exception and not page.error
    queue = jobpanel.job_queue()
    wait_until_idle(queue)
    job = queue.jobs[-1]
    assert job.status == "done", job.error
    (imported,) = job.runs
    assert imported.path.parent == empty_store and imported.seed == 3 and imported.imported["kind"] == "peft-adapter"
    np.testing.assert_array_equal(imported.predictions("test")[1], run.predictions("test")[1])


def test_imports_at_two_seeds_form_a_group_apart_from_trained_runs_and_sweeps_never_take_them(tmp_path):
    from peftviz.store.runs import group_runs
    from peftviz.sweep.plan import plan

    store = tmp_path / "runs"
    run = smoke_run(store, "lora", "tiny-bert")
    exported = export_run(run, tmp_path / "adapter")
    for seed in (0, 1):
        import_model(ImportRequest(str(exported), {"seed": seed}), store)
    groups = {group.label: group for group in group_runs(list_runs(store))}
    assert set(groups) == {"lora", "lora (imported)"}
    assert groups["lora (imported)"].seeds == [0, 1] and groups["lora"].seeds == [0]

    imported = next(r for r in list_runs(store) if r.imported and r.seed == 1)
    (planned,) = plan([imported.config], store)  # the imported run's own settings: trained, not skipped
    assert planned.action == "train"


def test_requirements_keep_transformers_where_peft_runs_prefix_tuning_on_bert():
    """transformers 5.24 renamed past_key_values, which peft 0.21's prefix tuning looks for by name
    (pyproject.toml says so; requirements.txt pins the same): the pin admits the installed release, not 5.24."""
    import transformers
    from packaging.requirements import Requirement
    from packaging.version import Version

    lines = (Path(__file__).resolve().parents[2] / "requirements.txt").read_text().splitlines()
    allowed = next(Requirement(line) for line in lines if line.startswith("transformers")).specifier
    assert Version(transformers.__version__) in allowed and Version("5.24.0") not in allowed
