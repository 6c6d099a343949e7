"""Settings at the boundary: every bad setting is refused on construction with a one-line ConfigError
naming it, whatever its source (CLI, app, a stored config.json); max_length is checked against the
loaded encoder's positions; pickled model weights are never unpickled.

One table, CASES, lists the hostile settings (overrides of a valid TrainConfig) and a fragment of
the message each must raise; `test_every_bound_of_every_option` walks the declared bounds of the
run settings and of every registered method's options.
"""

import math
import re
from dataclasses import fields

import pytest
import torch

from peftviz.classifier import build_classifier
from peftviz.cli.train import parse_method_options
from peftviz.errors import ConfigError, ModelLoadError
from peftviz.methods import METHODS
from peftviz.methods.peft_tuner import PeftTunerConfig
from peftviz.modeling.backbones import load_encoder, max_tokens, tiny_encoder
from peftviz.options import Bounds, shown
from peftviz.paths import minilm_path
from peftviz.run_config import PRESETS, TrainConfig, alpha_grid, preset_config
from peftviz.store.migrations import stored_config
from peftviz.sweep.variants import comparison_configs

NAN, INF = math.nan, math.inf
KERNEL = "kernel-prefix-propagation"


def method(name: str, **options) -> dict:
    return {"method": name, "method_options": options}


# (overrides of a valid TrainConfig, a fragment of the ConfigError's message)
CASES = [
    # numbers that are not finite
    ({"weight_decay": NAN}, "weight_decay must be a finite number, not nan"),
    ({"head_dropout": NAN}, "head_dropout must be a finite number, not nan"),
    ({"learning_rate": INF}, "learning_rate must be a finite number, not inf"),
    ({"learning_rate": NAN}, "learning_rate must be a finite number, not nan"),
    ({"warmup_ratio": -INF}, "warmup_ratio must be a finite number, not -inf"),
    ({"max_grad_norm": INF}, "max_grad_norm must be a finite number, not inf"),
    ({"max_grad_norm": 10**400}, "max_grad_norm must be a finite number, not an integer of about 401 digits"),
    ({"ece_bins": INF}, "ece_bins must be an integer, not inf"),
    (method(KERNEL, alpha=INF), "alpha must be a finite number, not inf"),
    (method(KERNEL, alpha=NAN), "alpha must be a finite number, not nan"),
    (method("prefix-tuning", prefix_dropout=NAN), "prefix_dropout must be a finite number, not nan"),
    (method("lora", lora_dropout=INF), "lora_dropout must be a finite number, not inf"),
    (method("tiny-attention", init_perturbation=NAN), "init_perturbation must be a finite number, not nan"),
    # out of range
    ({"weight_decay": -0.01}, "weight_decay must be in [0, 1], not -0.01"),
    ({"weight_decay": 2.0}, "weight_decay must be in [0, 1], not 2.0"),
    ({"head_dropout": 1.0}, "head_dropout must be in [0, 1), not 1.0"),
    ({"head_dropout": -0.1}, "head_dropout must be in [0, 1), not -0.1"),
    ({"learning_rate": 0.0}, "learning_rate must be in (0, 10], not 0.0"),
    ({"learning_rate": -1e-3}, "learning_rate must be in (0, 10], not -0.001"),
    ({"learning_rate": 1e6}, "learning_rate must be in (0, 10], not 1000000.0"),
    ({"max_grad_norm": -1.0}, "max_grad_norm must be >= 0, not -1.0"),
    ({"warmup_ratio": 1.0}, "warmup_ratio must be in [0, 1), not 1.0"),
    ({"ece_bins": 0}, "ece_bins must be in [1, 10000], not 0"),
    ({"ece_bins": 10**6}, "ece_bins must be in [1, 10000], not 1000000"),
    ({"epochs": 0}, "epochs must be in [1, 1000], not 0"),
    ({"epochs": 10**9}, "epochs must be in [1, 1000], not 1000000000"),
    ({"batch_size": 0}, "batch_size must be in [1, 65536], not 0"),
    ({"effective_batch_size": -16}, "effective_batch_size must be in [1, 65536], not -16"),
    ({"max_length": 1}, "max_length must be in [2, 16384], not 1"),
    ({"max_length": 10**6}, "max_length must be in [2, 16384], not 1000000"),
    ({"limit": 1}, "limit must be in [2, 1000000000], not 1"),
    ({"seed": -1}, "seed must be in [0, 4294967295], not -1"),
    ({"data_seed": 2**32}, "data_seed must be in [0, 4294967295], not 4294967296"),
    (method("prefix-tuning", prefix_length=10**6), "prefix_length must be in [1, 1024], not 1000000"),
    (method("prefix-propagation", prefix_length=0), "prefix_length must be in [1, 1024], not 0"),
    (method("prefix-tuning", mlp_hidden=10**5), "mlp_hidden must be in [1, 8192], not 100000"),
    (method("prefix-tuning", prefix_dropout=1.0), "prefix_dropout must be in [0, 1), not 1.0"),
    (method(KERNEL, alpha=0.0), "alpha must be in (0, 100], not 0.0"),
    (method(KERNEL, alpha=-0.01), "alpha must be in (0, 100], not -0.01"),
    (method(KERNEL, alpha=1e9), "alpha must be in (0, 100], not 1000000000.0"),
    (method("tiny-attention", n_heads=0), "n_heads must be in [1, 64], not 0"),
    (method("tiny-attention", head_dim=1000), "head_dim must be in [1, 64], not 1000"),
    (method("tiny-attention", init_perturbation=-0.5), "init_perturbation must be in [0, 1], not -0.5"),
    (method("lora", r=0), "r must be in [1, 1024], not 0"),
    (method("lora", lora_alpha=0), "lora_alpha must be in [1, 4096], not 0"),
    (method("lora", lora_dropout=1.0), "lora_dropout must be in [0, 1), not 1.0"),
    (method("prompt-tuning", prompt_length=10**6), "prompt_length must be in [1, 1024], not 1000000"),
    (method("houlsby-adapter", bottleneck=0), "bottleneck must be in [1, 4096], not 0"),
    # strings where numbers belong
    ({"epochs": "3"}, "epochs must be an integer, not '3'"),
    ({"learning_rate": "1e-3"}, "learning_rate must be a number, not '1e-3'"),
    ({"limit": "100"}, "limit must be an integer, not '100'"),
    (method("prefix-tuning", prefix_length="8"), "prefix_length must be an integer, not '8'"),
    (method(KERNEL, alpha="0.01"), "alpha must be a number, not '0.01'"),
    # booleans where numbers belong, numbers where booleans belong
    ({"epochs": True}, "epochs must be an integer, not True"),
    ({"batch_size": False}, "batch_size must be an integer, not False"),
    ({"weight_decay": True}, "weight_decay must be a number, not True"),
    (method("lora", r=True), "r must be an integer, not True"),
    (method("prefix-tuning", reparameterize=1), "reparameterize must be true or false, not 1"),
    (method("tiny-attention", average_heads="yes"), "average_heads must be true or false, not 'yes'"),
    # fractional and integral floats where integers belong
    ({"ece_bins": 2.5}, "ece_bins must be an integer, not 2.5"),
    ({"epochs": 3.0}, "epochs must be an integer, not 3.0"),
    ({"max_length": 128.0}, "max_length must be an integer, not 128.0"),
    (method("tiny-attention", n_heads=4.0), "n_heads must be an integer, not 4.0"),
    # None, containers and other types
    ({"epochs": None}, "epochs must be an integer, not None"),
    ({"learning_rate": None}, "learning_rate must be a number, not None"),
    ({"label": 3}, "label must be a string, not 3"),
    ({"model": None}, "model must be a string, not None"),
    ({"dataset": ["bbc-news"]}, "dataset must be a string, not ['bbc-news']"),
    ({"method_options": [1, 2]}, "method_options must be a mapping of names to values, not list"),
    ({"method_options": None}, "method_options must be a mapping of names to values, not NoneType"),
    ({"method": {"name": "lora"}}, "method must be a string, not {'name': 'lora'}"),
    ({"pooling": ["cls"]}, "pooling must be one of cls, mean, not ['cls']"),
    (method("tiny-attention", init_from=3), "init_from must be a string, not 3"),
    (method(KERNEL, kernel={"exp": 1}), "kernel must be one of exp, rbf, linear, polynomial, not {'exp': 1}"),
    # choices, unknown names, rules across fields
    ({"method": "no-such-method"}, "unknown method 'no-such-method'; choose one of fine-tuning, "),
    # any peft tuner by type: peft's own checks, one line each
    ({"method": "peft:FOO"}, "peft has no tuner type 'FOO'; its types: PROMPT_TUNING, "),
    ({"method": "peft:PREFIX_TUNING"}, "peft's PREFIX_TUNING is prompt learning, not a tuner of the encoder's modules"),
    (method("oft", r=4, oft_block_size=4), "peft refuses these OFT options: You can only specify either r (4) or"),
    (method("vera", r=-1), "r must be in [1, 1024], not -1"),  # VeRA divides by r: from 1
    (method("fourierft", n_frequency=10**7), "n_frequency must be in [1, 65536], not 10000000"),
    (method("lora-plus", loraplus_lr_ratio=0.5), "loraplus_lr_ratio must be in [1, 1024], not 0.5"),
    (method("dora", use_dora=False), "has no option(s) use_dora"),  # what makes it DoRA is not an option
    (
        method("dora", target_modules="/etc/passwd"),  # words only: no path reaches a shared server through it
        "target_modules takes a word or module names separated by commas: '/' is not a letter, digit, _ . - or ,",
    ),
    (method("vera", bias=""), "bias takes a word or module names separated by commas: it is empty"),
    ({"schedule": "step"}, "schedule must be one of linear, cosine, not 'step'"),
    ({"device": "gpu"}, "device must be auto, cpu, cuda or cuda:N (N up to 127), not 'gpu'"),
    ({"device": "cuda:0\nrm -rf /"}, "device must be auto, cpu, cuda or cuda:N (N up to 127), not 'cuda:0\\nrm -rf /'"),
    # torch keeps a device's index in 8 bits: cuda:256 would train on GPU 0, cuda:128 on "GPU -128"
    ({"device": "cuda:256"}, "device must be auto, cpu, cuda or cuda:N (N up to 127), not 'cuda:256'"),
    ({"device": "cuda:128"}, "device must be auto, cpu, cuda or cuda:N (N up to 127), not 'cuda:128'"),
    ({"device": "cuda:01"}, "device must be auto, cpu, cuda or cuda:N (N up to 127), not 'cuda:01'"),
    ({"batch_size": 16, "effective_batch_size": 24}, "effective_batch_size (24) must be a multiple of batch_size (16)"),
    (method("lora", rank=8), "LoraMethodConfig has no option(s) rank"),
    (method("fine-tuning", prefix_length=8), "FineTuningConfig has no option(s) prefix_length; options: none"),
]


def refusal(values: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**values)
    message = str(caught.value)
    assert "\n" not in message and message
    return message


@pytest.mark.parametrize(("overrides", "expected"), CASES, ids=[shown(case[0]) for case in CASES])
def test_a_bad_setting_is_refused_naming_it(overrides, expected):
    assert expected in refusal(overrides)


@pytest.mark.parametrize(("overrides", "expected"), CASES, ids=[shown(case[0]) for case in CASES])
def test_a_stored_bad_setting_is_refused_the_same_way(overrides, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        stored_config({"method": "prefix-propagation", **overrides})


def options_classes() -> list[type]:
    # every registered method's, and one peft tuner by type
    return [TrainConfig, *(cls.config_class for cls in METHODS.values()), METHODS["peft:RANDLORA"].config_class]


def just_outside(bounds: Bounds, integer: bool) -> list:
    step = 1 if integer else 1e-9
    outside = []
    if bounds.at_least is not None:
        outside.append(bounds.at_least - step)
    if bounds.above is not None:
        outside.append(bounds.above)
    if bounds.at_most is not None:
        outside.append(bounds.at_most + step if integer else bounds.at_most * (1 + 1e-9) + step)
    if bounds.below is not None:
        outside.append(bounds.below)
    return outside


def just_inside(bounds: Bounds) -> list:
    return [bound for bound in (bounds.at_least, bounds.at_most) if bound is not None]


def construct(options_class, name: str, value):
    if issubclass(options_class, PeftTunerConfig):  # peft's rules across fields may refuse one value alone
        try:
            return options_class.from_dict({name: value})
        except ConfigError as err:  # (OFT: r and oft_block_size both set), never the bound itself
            assert str(err).startswith(f"peft refuses these {options_class.peft_type} options: "), str(err)
            return None
    if options_class is not TrainConfig:
        return options_class.from_dict({name: value})
    if name in ("batch_size", "effective_batch_size"):  # one must divide the other
        return TrainConfig(batch_size=value, effective_batch_size=value)
    return TrainConfig(**{name: value})


def refused(options_class, name: str, value) -> str:
    with pytest.raises(ConfigError) as caught:
        options_class.from_dict({name: value})
    return str(caught.value)


@pytest.mark.parametrize("options_class", options_classes(), ids=lambda cls: cls.__name__)
def test_every_bound_of_every_option(options_class):
    """Every number with bounds is refused just outside them and accepted on an inclusive bound; every
    number a run sizes something by (an int) has an upper bound."""
    types = options_class.types()
    bounds = options_class.bounds()
    for f in fields(options_class):
        if types[f.name] is int:
            assert f.name in bounds and bounds[f.name].at_most is not None, f"{f.name} has no upper bound"
        if types[f.name] is float:
            assert f.name in bounds, f"{f.name} has no range"
    for name, range_ in bounds.items():
        integer = types[name] is int
        for value in just_outside(range_, integer):
            assert refused(options_class, name, value).startswith(f"{name} must be {range_}, not ")
        for value in just_inside(range_):
            construct(options_class, name, value)


def wrong_types(kind: type, optional: bool, finite: bool) -> list:
    """Values of the wrong type for a field parsed as `kind` (see Options.types)."""
    wrong = [[], {}, [1], {"a": 1}] + ([] if optional else [None])
    if kind is int:
        return [*wrong, True, False, 3.0, "3", NAN, INF]
    if kind is float:
        return [*wrong, True, False, "0.5", NAN, *([INF, -INF] if finite else [])]
    if kind is bool:
        return [*wrong, 0, 1, 1.0, "true"]
    return [*wrong, 3, 0.5, True]


@pytest.mark.parametrize("options_class", options_classes(), ids=lambda cls: cls.__name__)
def test_every_field_refuses_values_of_the_wrong_type(options_class):
    import typing

    hints = typing.get_type_hints(options_class)
    kinds, choices = options_class.types(), options_class.choices()
    for f in fields(options_class):
        if f.name == "method_options":
            continue
        optional = type(None) in typing.get_args(hints[f.name])
        for value in wrong_types(kinds[f.name], optional, f.metadata.get("finite", True)):
            message = refused(options_class, f.name, value)
            assert message.startswith(f"{f.name} must be "), (f.name, value, message)
            literal = f.name in choices and "choices" not in f.metadata  # a Literal: its choices say it all
            assert ("one of" in message) == literal, message


@pytest.mark.parametrize("options_class", options_classes(), ids=lambda cls: cls.__name__)
def test_values_as_the_cli_and_the_app_parse_them_are_accepted(options_class):
    """The CLI and the app parse a value as `types()` says (int(...), float(...)): that passes the checks."""
    parsers = options_class.types()
    for f in fields(options_class):
        if f.name == "method_options" or f.default is None:
            continue
        construct(options_class, f.name, parsers[f.name](f.default))


def test_edge_values_are_accepted():
    config = TrainConfig(
        head_dropout=0, max_grad_norm=0, weight_decay=0, warmup_ratio=0, learning_rate=1, limit=None, device="cuda:1"
    )
    assert config.learning_rate == 1 and config.max_grad_norm == 0
    assert TrainConfig(**method(KERNEL, alpha=1e-300, kernel="rbf")).method_config.alpha == 1e-300
    assert TrainConfig(**method("tiny-attention", init_from=None, n_heads=64, head_dim=64)).method_config.n_heads == 64


def test_a_new_options_class_declares_its_rules_in_one_place():
    """What a newcomer's method config gets from `option(...)`: types, bounds, `finite=False`, and
    `validate` for rules across fields (a plain ValueError becomes a ConfigError)."""
    from dataclasses import dataclass

    from peftviz.options import Options, option

    @dataclass
    class Sample(Options):
        width: int = option(4, "a width", at_least=1, at_most=8)
        ceiling: float = option(math.inf, "no ceiling by default", above=0, finite=False)
        floor: float = option(0.0, "a floor")

        def validate(self) -> None:
            if self.floor >= self.ceiling:
                raise ValueError(f"floor ({self.floor}) must be below ceiling ({self.ceiling})")

    assert Sample().ceiling == INF and Sample.bounds()["width"] == Bounds(at_least=1, at_most=8)
    for values, expected in [
        ({"width": 9}, "width must be in [1, 8], not 9"),
        ({"ceiling": NAN}, "ceiling must be a finite number, not nan"),
        ({"ceiling": -INF}, "ceiling must be > 0, not -inf"),
        ({"floor": INF}, "floor must be a finite number, not inf"),
        ({"floor": 2.0, "ceiling": 1.0}, "floor (2.0) must be below ceiling (1.0)"),
    ]:
        with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
            Sample.from_dict(values)


def test_presets_comparisons_grids_and_cli_options_still_build():
    for preset in PRESETS:
        assert len(comparison_configs(preset, "all")) > len(METHODS)
        assert len(alpha_grid(preset)) == 6
    for name in METHODS:
        assert preset_config("smoke", name).method == name
    options = parse_method_options(KERNEL, ["alpha=1", "prefix_length=16", "alpha_trainable=true"])
    assert TrainConfig(**method(KERNEL, **options)).method_config.alpha == 1.0


def test_a_huge_prefix_is_refused_before_anything_is_allocated(monkeypatch):
    from peftviz.methods import prefix_params

    def never(*args, **kwargs):
        raise AssertionError("the prefix encoder was built")

    monkeypatch.setattr(prefix_params.PrefixEncoder, "__init__", never)
    with pytest.raises(ConfigError, match=r"prefix_length must be in \[1, 1024\], not 1000000"):
        build_classifier(tiny_encoder("bert"), "prefix-tuning", 3, {"prefix_length": 10**6})


# ---------------------------------------------------------------------------------------------
# max_length against the encoder's positions


@pytest.mark.parametrize("family", ["bert", "roberta", "longformer"])
def test_max_tokens_is_what_the_encoder_can_take(family):
    """max_tokens(encoder) tokens run; one more does not (RoBERTa-style tables lose padding_idx + 1 rows)."""
    encoder = tiny_encoder(family, pad_token_id=1).eval()
    n = max_tokens(encoder)
    assert n == {"bert": 514, "roberta": 512, "longformer": 1024}[family]
    model = build_classifier(encoder, "fine-tuning", 3, max_length=n).eval()
    with torch.no_grad():
        assert model(torch.full((1, n), 5)).logits.shape == (1, 3)
        with pytest.raises((IndexError, RuntimeError)):
            model(torch.full((1, n + 1), 5))


@pytest.mark.parametrize("name", list(METHODS))
def test_a_max_length_beyond_the_positions_is_refused_for_every_method(name):
    encoder = tiny_encoder("roberta", pad_token_id=1)
    with pytest.raises(ConfigError, match=r"^max_length 513 is beyond roberta's 512 positions$"):
        build_classifier(encoder, name, 3, max_length=513)
    assert not any("lora_" in key or "ia3_" in key for key in encoder.state_dict())  # the encoder is untouched
    build_classifier(encoder, name, 3, max_length=512)


def test_the_message_names_the_model_as_the_user_wrote_it():
    encoder, _ = load_encoder("minilm")
    with pytest.raises(ConfigError, match=r"^max_length 600 is beyond minilm's 512 positions$"):
        build_classifier(encoder, "prefix-propagation", 3, max_length=600)


def test_training_with_a_too_long_max_length_leaves_no_run_folder(tmp_path):
    from peftviz.training.trainer import train

    config = preset_config("smoke", "fine-tuning", max_length=600)  # tiny-bert: 514 positions
    with pytest.raises(ConfigError, match="max_length 600 is beyond tiny-bert's 514 positions"):
        train(config, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# ---------------------------------------------------------------------------------------------
# weights from safetensors only


@pytest.fixture
def pickled_model(tmp_path):
    """A tiny BERT folder with its weights only as pytorch_model.bin (and MiniLM's tokenizer)."""
    from transformers import AutoTokenizer

    folder = tmp_path / "pickled-bert"
    encoder = tiny_encoder("bert", vocab_size=30522)
    encoder.config.save_pretrained(folder)
    torch.save(encoder.state_dict(), folder / "pytorch_model.bin")
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    return folder


def test_pickled_weights_are_refused_without_unpickling(pickled_model, monkeypatch):
    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(str(pickled_model))
    message = str(caught.value)
    assert "\n" not in message
    assert "no safetensors weights, only pickled PyTorch ones (pytorch_model.bin)" in message
    assert "use_safetensors=False" in message and "save_pretrained" in message


def test_the_suggested_conversion_makes_the_model_loadable(pickled_model):
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(str(pickled_model))
    command = re.search(r'python -c "(.*?)"', str(caught.value)).group(1)
    exec(command, {})  # noqa: S102 - the command the message tells the user to run, on a file they trust
    assert (pickled_model / "model.safetensors").is_file()
    encoder, _ = load_encoder(str(pickled_model))
    assert max_tokens(encoder) == 514


def test_the_hub_message_converts_into_a_new_folder():
    from peftviz.modeling.backbones import _pickled_message

    message = _pickled_message("someone/old-bert")
    assert "save_pretrained('old-bert-safetensors')" in message and "AutoTokenizer" in message
    assert message.endswith("then use the model folder old-bert-safetensors")


def test_a_damaged_safetensors_file_is_a_one_line_model_load_error(pickled_model):
    (pickled_model / "model.safetensors").write_bytes(b"garbage" * 10)
    with pytest.raises(
        ModelLoadError, match=r"^cannot load the weights of '.*' \(.*/model.safetensors\): .*header"
    ) as caught:
        load_encoder(str(pickled_model))
    assert "\n" not in str(caught.value)
