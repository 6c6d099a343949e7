"""`python -m peftviz import SOURCE --dataset D`: a model trained elsewhere, evaluated on D and
stored as an evaluation-only run that every page reads like a trained one.

    peft adapter      (any peft type peft can apply to the encoder; task SEQ_CLS) on a BERT, RoBERTa or
                      Longformer base: base_model_name_or_path unless --model says otherwise; read as a
                      run of the most specific peftviz method that holds it (`adapter_method`: the
                      method an export names, the named methods of its peft type, `peft:<TYPE>`)
    HF classifier     an AutoModelForSequenceClassification folder (safetensors only): a run of the method
                      that trains the whole encoder (fine-tuning)
    peftviz export    a run `export` wrote with one of peftviz's own methods

Each is first loaded the way its own library loads it (the adapter by peft onto the architecture's
AutoModelForSequenceClassification, the classifier by transformers) and copied into a peftviz
classifier (heads: hf.py); then both compute the logits of D's first validation batch, and an
import whose logits differ by more than TOLERANCE is refused: peftviz never stores numbers of a
model it does not reproduce (a peft feature it lacks, say). The model's classes are matched to
D's by name (id2label, or a peftviz export's label names; by position where the model names
them only LABEL_0, LABEL_1, ...), and the head's rows are put in D's order.

Everything that can be wrong with a source is found before the run folder is created: a refused
import leaves no run. An adapter_config.json is checked before peft sees it, and before the base is
loaded where the file alone tells (adapter_config.py: every field by peft's annotation, the options
by the reading method's bounds); peft builds its config from the checked object. The run holds one "epoch" (the validation evaluation), the test predictions,
the tensors (params.safetensors), and `imported` in config.json: kind, source, revision, the
SHA-256 of each file read and how the labels were matched.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from peftviz.classifier import PeftClassifier, build_classifier
from peftviz.data.loading import load_data
from peftviz.data.uploads import data_sha256
from peftviz.errors import ConfigError, ExchangeError, RunError
from peftviz.exchange import adapter_config, sources
from peftviz.exchange.hf import (
    PROJECTION,
    Head,
    checkpoint_tensors,
    classifier_for,
    copy_into,
    encoder_names,
    head_of,
    live_tensors,
    peftviz_base,
    quiet_peft_wrapping,
)
from peftviz.exchange.request import ImportRequest
from peftviz.methods import METHODS, PEFT_PREFIX, backbone_method
from peftviz.methods.peft_tuner import CANNOT_APPLY
from peftviz.modeling.backbones import check_max_length, load_encoder
from peftviz.options import shown, shown_name
from peftviz.paths import store_dir
from peftviz.run_config import MAX_LABEL_CHARS, TrainConfig, preset_config
from peftviz.store import schema
from peftviz.store.migrations import stored_config
from peftviz.store.runs import Run, load_run
from peftviz.store.schema import HF_CLASSIFIER, PARAMS_FILE, PEFT_ADAPTER, PEFTVIZ_EXPORT
from peftviz.store.writer import RunWriter
from peftviz.training.inference import evaluation_metrics, make_loader, pick_device, predict, rebuild, tokenize
from peftviz.training.progress import Progress, ProgressCallback

SPLITS = ("validation", "test")
TOLERANCE = 1e-4  # max |Δ logit| between peftviz and the model's own library on the first batch (float32: ~1e-6)
UNNAMED = re.compile(r"LABEL_\d+")  # transformers' names for classes nobody named
# settings an export's run fixes: the import evaluates on the same data unless told otherwise
RUN_DATA_SETTINGS = (
    "dataset",
    "limit",
    "max_length",
    "data_seed",
    "seed",
    "batch_size",
    "effective_batch_size",
    "ece_bins",
)


@dataclass
class Loaded:
    """A source as a peftviz classifier (its classes in the source's order), and what it knows of itself."""

    model: PeftClassifier
    tokenizer: object
    base: str  # the encoder name peftviz loads (config.model)
    label_names: list[str] | None  # the source's class names in its order; None where it names none
    reference: Callable[[Tensor, Tensor], Tensor] | None  # the source library's logits, (B, T) x 2 -> (B, C)
    settings: dict  # TrainConfig fields the source fixes: its method and options, an export's data settings


def import_model(request: ImportRequest, runs_dir: Path | None = None, progress: ProgressCallback | None = None) -> Run:
    """Import `request.source` (a folder or hub id) as a run in `runs_dir`; `progress` hears each
    evaluated batch (the validation split, then the test split) and the end."""
    report = progress or (lambda event: None)
    found = sources.open_source(request.source)
    loaded = LOADERS[found.kind](found, request.base)
    config = _config(loaded, request.preset, request.settings)
    check_max_length(loaded.model.encoder, config.max_length)
    data = load_data(config.dataset, seed=config.data_seed, limit=config.limit)
    model = loaded.model.eval()
    names = loaded.label_names or [f"LABEL_{index}" for index in range(model.num_labels)]
    order, matched = match_labels(names, data.label_names, request.source, config.dataset)
    put_classes_in_order(model, order)
    pad_id = loaded.tokenizer.pad_token_id
    loaders = {
        name: make_loader(tokenize(data.splits[name], loaded.tokenizer, config.max_length), config.batch_size, pad_id)
        for name in SPLITS
    }
    if loaded.reference is not None:  # on the CPU, in float32, where the source's library loaded it
        check_reproduced(model, loaded.reference, next(iter(loaders["validation"])), order, request.source)
    device = pick_device(config.device)
    model.to(device)
    started = time.perf_counter()
    evaluations = {
        name: predict(model, _reported(loader, report, request.title, name), device) for name, loader in loaders.items()
    }
    seconds = time.perf_counter() - started
    imported = {
        "kind": found.kind,
        "source": request.source,
        "revision": found.revision,
        "files": found.files,
        "labels": matched,
    }
    run = _store(config, model, data, evaluations, seconds, imported, runs_dir)
    report(Progress(request.title, "done", 1, 1))
    return run


def _reported(loader, report: ProgressCallback, title: str, split: str):
    """The loader's batches, each followed by a Progress event: "evaluate validation", batch i of n."""
    for index, batch in enumerate(loader, start=1):
        yield batch
        report(Progress(title, f"evaluate {split}", 1, 1, index, len(loader)))


def _config(loaded: Loaded, preset: str, overrides: dict) -> TrainConfig:
    settings = dict(loaded.settings)
    method, label = settings.pop("method"), settings.pop("label", None)
    given = {key: value for key, value in overrides.items() if value is not None}
    label = given.pop("label", None) or f"{label or method} (imported)"
    config = preset_config(preset, method, **{**settings, **given})
    # one evaluation, no training: "epoch" 1 is the validation evaluation of the model as loaded, in float32
    return replace(
        config,
        model=loaded.base,
        epochs=1,
        effective_batch_size=config.batch_size,
        precision="fp32",
        label=label[:MAX_LABEL_CHARS],
    )


def match_labels(model_names: list[str], data_names: list[str], source: str, dataset: str):
    """(order, how): order[d] is the model's class for the dataset's class d; how: "by name" or "by position"."""
    if all(UNNAMED.fullmatch(name) for name in model_names):
        if len(model_names) != len(data_names):
            raise ExchangeError(
                f"labels do not match: {source} has {len(model_names)} unnamed classes, {dataset} has "
                f"{len(data_names)} ({', '.join(data_names)})"
            )
        return list(range(len(data_names))), "by position"
    if sorted(model_names) != sorted(data_names):
        raise ExchangeError(
            f"labels do not match: {source} has {', '.join(model_names)}; {dataset} has {', '.join(data_names)}"
        )
    return [model_names.index(name) for name in data_names], "by name"


@torch.no_grad()
def put_classes_in_order(model: PeftClassifier, order: list[int]) -> None:
    """Reorder the head's output rows so that output d is the dataset's class d."""
    projection = model.get_submodule(PROJECTION)
    projection.weight.copy_(projection.weight[order].clone())
    projection.bias.copy_(projection.bias[order].clone())


@torch.no_grad()
def check_reproduced(model: PeftClassifier, reference, batch: dict, order: list[int], source: str) -> None:
    """Refuse a model whose logits peftviz does not reproduce within TOLERANCE on `batch`."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    ours = model(ids, mask).logits.float()
    theirs = reference(ids, mask).float()[:, order]
    gap = float((ours - theirs).abs().max())
    if not gap <= TOLERANCE:
        raise ExchangeError(
            f"peftviz does not reproduce {source}: its logits differ from its own library's by up to {gap:.2g} on the "
            "first validation batch (it may use a feature peftviz's method lacks); nothing imported"
        )


def _store(config, model, data, evaluations: dict, seconds: float, imported: dict, runs_dir) -> Run:
    from peftviz.training.trainer import environment  # the same record as a trained run

    metrics = {name: evaluation_metrics(*evaluations[name], config.ece_bins) for name in evaluations}
    recorded = {
        "label_names": data.label_names,
        "parameters": model.parameter_counts(),
        "environment": environment(pick_device(config.device)),
        "data_sha256": data_sha256(config.dataset),
        "attempts": [],
        "imported": imported,
    }
    writer = RunWriter.create(Path(runs_dir or store_dir()), config, recorded)
    try:
        writer.write_epoch({"epoch": 1, **metrics["validation"], "seconds": seconds}, *evaluations["validation"])
        writer.write_params({k: v.cpu().contiguous() for k, v in model.trainable_state_dict().items()}, 1)
        writer.write_predictions("test", *evaluations["test"])
        writer.finish({"params_epoch": 1, "test": metrics["test"]})
    finally:
        writer.close()
    return load_run(writer.path)


# ---------------------------------------------------------------- the three kinds of source


def _load_peft_adapter(source: sources.Source, base: str | None) -> Loaded:
    adapter = source.json(sources.ADAPTER_CONFIG)
    manifest = source.json(sources.MANIFEST) if source.has(sources.MANIFEST) else {}
    exported = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    method, options = adapter_method(adapter, source.name, exported.get("method"))
    peft_config = _checked(source.name, lambda: adapter_config.peft_config(adapter))  # before any tensor is read
    names = _label_names(manifest, source.name) if "label_names" in manifest else _config_label_names(source)
    weights = _adapter_weights(source)
    base = base or peftviz_base(adapter.get("base_model_name_or_path") or "")
    if not base:
        raise ExchangeError(f"{source.name} names no base model (base_model_name_or_path): give one with --model")
    encoder, tokenizer = load_encoder(base)
    _checked(source.name, lambda: adapter_config.check_base_fields(adapter, encoder.config, base))
    head = head_of(encoder.config.model_type)
    n_classes = _saved_projection(weights, head, source.name).shape[0]
    peft_model = _peft_model(source, peft_config, encoder, head, n_classes, weights, base)
    model = build_classifier(encoder, method.name, n_classes, options)
    _copy_from_peft(model, peft_model, head)
    settings = {key: exported[key] for key in (*RUN_DATA_SETTINGS, "label") if key in exported}
    settings |= {"method": method.name, "method_options": options}

    def reference(ids: Tensor, mask: Tensor) -> Tensor:
        return peft_model(input_ids=ids, attention_mask=mask).logits

    return Loaded(model, tokenizer, base, names, reference, settings)


def _peft_model(source: sources.Source, peft_config, encoder, head: Head, n_classes: int, weights: dict, base: str):
    """The adapter as peft loads it: its checked config (`adapter_config.peft_config`) and its weights on the
    architecture's classifier of `encoder`."""
    from peft import get_peft_model

    classifier = classifier_for(encoder.config, [f"LABEL_{i}" for i in range(n_classes)])
    copy_into(live_tensors(classifier), encoder.state_dict(), encoder_names(encoder, classifier))
    # the base as loaded here (the run's record keeps the source), as get_peft_model names a classifier built from
    # config (None, not its name_or_path ""): no warning that it was "renamed"
    peft_config.base_model_name_or_path = classifier.name_or_path or None
    try:
        with quiet_peft_wrapping():
            peft_model = get_peft_model(classifier, peft_config).eval()
    except CANNOT_APPLY as err:  # settings each in range that peft cannot build together on this base
        raise ExchangeError(f"peft cannot build {source.name} on base {base}: {err}".splitlines()[0]) from None
    _check_rank_pattern(peft_model, base, source.name)
    _load_adapter_weights(peft_model, weights, base, source.name)
    if "pooler" in head.modules_to_save and "pooler" not in (peft_config.modules_to_save or []):  # BERT's
        _base_pooler(classifier, base, source.name)  # the adapter trained on the base's own pooler
    return peft_model


def adapter_method(adapter: dict, name: str, exported_as: str | None = None):
    """(method class, options) that hold the adapter: the first of `_candidates` whose `options_from_peft`
    takes it, its values checked (`adapter_config`: every field peft reads by its annotation, the options by the
    method's bounds) before peft sees them. ExchangeError, one line: a damaged value, naming adapter_config.json and
    the field; or, where no method holds the adapter, the reason the last (the most general) gave."""
    if adapter.get("task_type") != "SEQ_CLS":
        raise ExchangeError(
            f"{name} is a peft adapter for task {shown_name(adapter.get('task_type'))}; peftviz imports "
            f"sequence-classification adapters (task_type in {sources.ADAPTER_CONFIG}: SEQ_CLS)"
        )
    peft_type = adapter.get("peft_type")
    candidates = _candidates(peft_type, exported_as)
    if not candidates:
        named = sorted({cls.peft_type for cls in METHODS.values() if cls.peft_type})
        raise ExchangeError(
            f"{name} is a {shown_name(peft_type)} adapter, which neither a peftviz method ({', '.join(named)}) nor any "
            f"tuner of peft ({PEFT_PREFIX}<TYPE>) holds (peft_type in {sources.ADAPTER_CONFIG})"
        )
    _checked(name, lambda: adapter_config.check_fields(adapter, peft_type))
    refusals = []
    for cls in candidates:
        try:
            options = cls.options_from_peft(adapter)
        except ConfigError as err:
            refusals.append(str(err).splitlines()[0])
            continue
        _checked(name, lambda cls=cls, options=options: cls.check_peft_values(adapter, options))
        return cls, options
    raise ExchangeError(f"{name}: no peftviz method holds this {peft_type} adapter: {refusals[-1]}")


def _checked(name: str, check: Callable[[], object]):
    """`check()`'s result; its ConfigError as the one-line ExchangeError of a damaged adapter_config.json."""
    try:
        return check()
    except ConfigError as err:
        raise ExchangeError(f"{name}: {sources.ADAPTER_CONFIG}: {err}".splitlines()[0]) from None


def _reader(cls):
    """The method that reads adapters of `cls`'s peft type: itself, or the one it names in `imports_as`
    (peft saves a P-tuning prompt without the encoder that made it)."""
    return METHODS[cls.imports_as] if getattr(cls, "imports_as", None) else cls


def _candidates(peft_type, exported_as: str | None) -> list:
    """The methods that may hold an adapter of `peft_type`, most specific first:

    1. the method a peftviz export names (peftviz.json), so that a run comes back as the method it was
       (or as the method its adapters are read as);
    2. the named methods of that type, those with more `fixed` settings first (dora's use_dora, pissa's
       init_lora_weights before lora); of methods with the same fixed settings only the first registered,
       since an adapter cannot tell them apart (lora-plus differs from lora in its learning rates alone);
    3. `peft:<TYPE>`, peft's tuner of that type with all of its plain options (none for prompt learning).
    """
    if not isinstance(peft_type, str):  # null is the peft_type of every method peft does not have
        return []
    named = [_reader(METHODS[name]) for name in METHODS if METHODS[name].peft_type == peft_type]
    order, seen = [], set()
    for cls in sorted(named, key=lambda c: -len(getattr(c, "fixed", {}))):  # stable: registry order within
        signature = (cls.peft_type, frozenset(getattr(cls, "fixed", {}).items()))
        if signature not in seen:
            seen.add(signature)
            order.append(cls)
    general = _peft_tuner(peft_type)
    order += [general] if general is not None else []
    own = _exported_method(exported_as)
    if own is not None and (own is general or any(own is cls for cls in named)):
        order = [own, *[cls for cls in order if cls is not own]]
    return order


def _exported_method(name):
    """The reader of the method a peftviz export names, or None (no export, or a method peftviz lacks now)."""
    if not isinstance(name, str):
        return None
    try:
        return _reader(METHODS[name])
    except KeyError:
        return None


def _peft_tuner(peft_type):
    """`peft:<peft_type>`, or None where peft has no tuner of that type for an encoder's modules."""
    if not isinstance(peft_type, str):
        return None
    try:
        return METHODS[f"{PEFT_PREFIX}{peft_type}"]
    except KeyError:
        return None


def _adapter_weights(source: sources.Source) -> dict[str, Tensor]:
    path = source.folder / sources.ADAPTER_WEIGHTS
    if not path.is_file():
        if source.has(sources.PICKLED_ADAPTER):
            raise ExchangeError(
                f"{source.name} has only pickled adapter weights ({sources.PICKLED_ADAPTER}), which peftviz does not "
                "load: unpickling can run code. If you trust the file, save the adapter again with peft's "
                "save_pretrained(..., safe_serialization=True)"
            )
        raise ExchangeError(f"{source.name} has {sources.ADAPTER_CONFIG} but no {sources.ADAPTER_WEIGHTS}")
    try:
        schema.safetensors_header(path, sources.ADAPTER_WEIGHTS)  # its header against its size, before reading
        return load_file(str(path))
    except (OSError, SafetensorError, RunError) as err:
        raise ExchangeError(f"{source.name}: cannot read {sources.ADAPTER_WEIGHTS}: {err}".splitlines()[0]) from None


def _saved_projection(weights: dict[str, Tensor], head, name: str) -> Tensor:
    """The adapter's saved class projection (C, D): how many classes it has."""
    saved = head.names[f"{PROJECTION}.weight"]
    found = [tensor for key, tensor in weights.items() if key.endswith(f".{saved}")]
    if not found:
        raise ExchangeError(f"{name} carries no classification head ({saved}): it cannot classify")
    return found[0]


def _check_rank_pattern(peft_model, base: str, name: str) -> None:
    """Refuse an AdaLoRA rank_pattern that names a map the base has no AdaLoRA layer for: peft resizes each map it
    names (by its name less ".lora_E") when it loads the weights."""
    config = peft_model.peft_config["default"]
    if config.peft_type != "ADALORA":
        return
    model = peft_model.get_base_model()
    layers = {module for module, layer in model.named_modules() if hasattr(layer, "lora_E")}
    for key in config.rank_pattern or {}:
        if not key.endswith(".lora_E") or "default" in key or key.removesuffix(".lora_E") not in layers:
            raise ExchangeError(
                f"{name}: {sources.ADAPTER_CONFIG}: rank_pattern names {shown(key)}, which is no AdaLoRA map "
                f"(<module>.lora_E) of base {base}"
            )


def _load_adapter_weights(peft_model, weights: dict[str, Tensor], base: str, name: str) -> None:
    """Refuse an adapter whose tensors do not fit the base (trained on another), then load them."""
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

    expected = {key: tuple(tensor.shape) for key, tensor in get_peft_model_state_dict(peft_model).items()}
    for key in sorted(weights):
        if key not in expected:
            raise ExchangeError(f"{name} does not fit base {base}: it has {key}, which {base} has no place for")
        if tuple(weights[key].shape) != expected[key]:
            raise ExchangeError(
                f"{name} does not fit base {base}: {key} is {tuple(weights[key].shape)} in the adapter, "
                f"{expected[key]} on {base} (the adapter was trained on another base)"
            )
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ExchangeError(f"{name} lacks {len(missing)} of the tensors its config describes, e.g. {missing[0]}")
    set_peft_model_state_dict(peft_model, weights)


def _base_pooler(classifier, base: str, name: str) -> None:
    names = {f"bert.pooler.dense.{p}": f"bert.pooler.dense.{p}" for p in ("weight", "bias")}
    found = checkpoint_tensors(base, list(names))
    if len(found) != len(names):
        raise ExchangeError(
            f"{name} leaves BERT's pooler, which its classifier reads, to the base, and {base} has no pooler weights "
            "peftviz can read (a local checkpoint's safetensors): give a base that has them with --model"
        )
    copy_into(live_tensors(classifier), found, names)


def _copy_from_peft(model: PeftClassifier, peft_model, head) -> None:
    """The adapter's tensors into peftviz's classifier: what it injected (by name), its prompt, the head."""
    live = live_tensors(peft_model.get_base_model())
    config = peft_model.peft_config["default"]
    live |= _full_rank(live, getattr(config, "rank_pattern", None) if config.peft_type == "ADALORA" else None)
    prefix = peft_model.get_base_model().base_model_prefix
    ours = model.state_dict(keep_vars=True)
    injected = [name for name in model.trainable_state_dict() if name.startswith("encoder.")]
    copy_into(ours, live, {f"{prefix}.{name.removeprefix('encoder.')}": name for name in injected})
    copy_into(ours, live, {theirs: mine for mine, theirs in head.names.items()})
    if model.method.peft_prompt() is not None:  # prompt learning: peft keeps the prompt outside the encoder
        state = model.method.prompt_state(_saved_prompt(peft_model))
        copy_into(ours, state, {name: name for name in state})


def _saved_prompt(peft_model) -> Tensor:
    """The prompt tensor peft computes with. P-tuning's adapter holds the prompt its encoder made, and peft
    loads it without the encoder (no MLP in inference mode) and uses it as it is; for the other types it is
    what the prompt encoder makes of its tokens (prefix tuning's projection, if any)."""
    if peft_model.peft_config["default"].peft_type == "P_TUNING":
        return peft_model.prompt_encoder["default"].embedding.weight.detach()
    return peft_model.get_prompt_embedding_to_save("default").detach()


def _full_rank(live: dict[str, Tensor], rank_pattern: dict | None) -> dict[str, Tensor]:
    """AdaLoRA's triplets at their initial rank: peft drops the pruned ones (λ = 0) when it saves and resizes
    its layers to what is left when it loads (rank_pattern: per map, which of the init_r triplets are kept);
    peftviz keeps all init_r, the pruned ones at 0, which contribute P_i · 0 · Q_i = 0 either way."""
    full = {}
    for key, kept in (rank_pattern or {}).items():
        module = key.removesuffix(".default").removesuffix(".lora_E")
        kept = torch.tensor(kept, dtype=torch.bool)
        for part, axis in (("lora_E", 0), ("lora_A", 0), ("lora_B", 1)):
            name = f"{module}.{part}.default"
            saved = live[name].detach()
            shape = list(saved.shape)
            shape[axis] = len(kept)
            tensor = saved.new_zeros(shape)
            tensor[(slice(None),) * axis + (kept,)] = saved
            full[name] = tensor
    return full


def _config_label_names(source: sources.Source) -> list[str] | None:
    """Class names from a config.json's id2label (in class order), if the folder has one."""
    if not source.has("config.json"):
        return None
    id2label = source.json("config.json").get("id2label") or {}
    if not isinstance(id2label, dict):
        raise ExchangeError(f"{source.name}: config.json's id2label is not an object of class ids and names")
    try:
        return [str(id2label[key]) for key in sorted(id2label, key=int)] or None
    except (TypeError, ValueError):
        raise ExchangeError(f"{source.name}: config.json's id2label has keys that are not class ids") from None


def _label_names(manifest: dict, name: str) -> list[str]:
    """A peftviz export's class names (its peftviz.json's label_names): two or more strings."""
    names = manifest.get("label_names")
    if not (isinstance(names, list) and len(names) >= 2 and all(isinstance(n, str) for n in names)):
        raise ExchangeError(f"{name}: {sources.MANIFEST} has no label_names (a list of class names)")
    return names


def _load_hf_classifier(source: sources.Source, base: str | None) -> Loaded:
    from transformers import AutoModelForSequenceClassification

    if base:
        raise ExchangeError("--model is for adapters: a Hugging Face classifier folder is its own base")
    config = source.json("config.json")
    architectures = config.get("architectures") or []
    if not any(str(name).endswith("ForSequenceClassification") for name in architectures):
        raise ExchangeError(
            f"{source.name} is a {', '.join(map(str, architectures)) or config.get('model_type')} model, not a "
            "sequence classifier (…ForSequenceClassification)"
        )
    head = head_of(config.get("model_type"))
    folder = str(source.folder)
    encoder, tokenizer = load_encoder(folder)  # refuses pickled-only weights with the conversion command
    reference_model = AutoModelForSequenceClassification.from_pretrained(folder, use_safetensors=True).eval()
    names = _config_label_names(source)
    method = backbone_method().name  # a fine-tuned classifier: every weight trained
    model = build_classifier(encoder, method, len(names or []) or reference_model.num_labels, {})
    copy_into(model.state_dict(keep_vars=True), live_tensors(reference_model), {t: m for m, t in head.names.items()})

    def reference(ids: Tensor, mask: Tensor) -> Tensor:
        return reference_model(input_ids=ids, attention_mask=mask).logits

    return Loaded(model, tokenizer, folder, names, reference, {"method": method, "method_options": {}})


def _load_peftviz_export(source: sources.Source, base: str | None) -> Loaded:
    manifest = source.json(sources.MANIFEST)
    try:
        stored = stored_config(manifest.get("config"))
    except ValueError as err:
        raise ExchangeError(f"{source.name}: {sources.MANIFEST}: {err}".splitlines()[0]) from None
    names = _label_names(manifest, source.name)
    stored = replace(stored, model=base or stored.model)
    try:
        model, tokenizer = rebuild(
            stored, len(names), lambda: load_file(str(source.folder / PARAMS_FILE)), f"{source.name}: {PARAMS_FILE}"
        )
    except (OSError, SafetensorError, RunError) as err:
        raise ExchangeError(str(err).splitlines()[0]) from None
    settings = {key: getattr(stored, key) for key in (*RUN_DATA_SETTINGS, "label", "pooling", "head_dropout")}
    settings |= {"method": stored.method, "method_options": stored.setting_options}
    return Loaded(model, tokenizer, stored.model, names, None, settings)


LOADERS = {PEFT_ADAPTER: _load_peft_adapter, HF_CLASSIFIER: _load_hf_classifier, PEFTVIZ_EXPORT: _load_peftviz_export}
