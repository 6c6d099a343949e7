"""MonteCLoRA (peft's LoraConfig(monteclora_config=...)) as a peftviz method: LoRA in evaluation, a stochastic A in
training, peft's variational loss as its `regularization`, a run that trains, stores and rebuilds, a peft adapter
both ways, and hostile options refused in one line."""

import json
import math
import types

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from peft import PeftModel
from peft.tuners.lora.model import LoraModel
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from peftviz.errors import ConfigError, ExchangeError
from peftviz.exchange.export import export_run
from peftviz.exchange.hf import quiet_peft_wrapping
from peftviz.exchange.imports import adapter_method, import_model
from peftviz.exchange.request import ImportRequest
from peftviz.methods import METHODS
from peftviz.methods.monteclora import MAX_BUFFERED, MonteCLoRAConfig
from peftviz.run_config import preset_config
from peftviz.training.inference import load_trained, make_loader, predict, run_data, tokenize
from peftviz.training.trainer import train
from tests.exchange.test_exchange import base_folder, logits_of, perturb_stored_params, smoke_run, split_loader
from tests.support.helpers import FAMILIES, FUZZ, each_case_within, padded_batch, tiny_classifier

pytestmark = pytest.mark.usefixtures("one_thread")
R = 4
SAMPLER = ".lora_monteclora_sampler.default."


def moved(model, seed: int = 1, scale: float = 0.5):
    """`model` with every trainable tensor moved by N(0, scale²): B away from its zero start, so A matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=g))
    return model


def peft_loss(model):
    """peft's own `LoraModel._get_monteclora_loss` over the classifier's encoder (which is no peft model)."""
    return LoraModel._get_monteclora_loss(
        types.SimpleNamespace(active_adapters=["default"], modules=model.encoder.modules)
    )


def twice(model, ids, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Two forwards with the same dropout masks (the same torch seed): they differ by what the sampler draws."""
    outputs = []
    for _ in range(2):
        torch.manual_seed(7)
        outputs.append(model(ids, mask).logits)
    return outputs[0], outputs[1]


@pytest.mark.parametrize("family", FAMILIES)
def test_in_evaluation_it_is_lora_with_the_same_a_and_b(family):
    ours = moved(tiny_classifier("monteclora", family, r=R, sample_scaler=0.5))
    lora = tiny_classifier("lora", family, r=R)
    state = ours.trainable_state_dict()
    assert set(lora.trainable_state_dict()) < set(state)  # LoRA's A, B and head; the sampler's s and e besides
    lora.load_state_dict({name: state[name] for name in lora.trainable_state_dict()}, strict=False)
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(ours(ids, mask).logits, lora(ids, mask).logits)
        assert torch.equal(ours(ids, mask).logits, ours(ids, mask).logits)  # no sampling in evaluation


def test_in_training_a_is_sampled_and_the_noise_is_the_only_difference():
    ids, mask = padded_batch()
    noisy = moved(tiny_classifier("monteclora", r=R, sample_scaler=0.1)).train()
    first, second = twice(noisy, ids, mask)
    assert (first - second).abs().max() > 1e-3
    quiet = moved(tiny_classifier("monteclora", r=R, sample_scaler=0.0)).train()
    first, second = twice(quiet, ids, mask)
    torch.testing.assert_close(first, second, atol=1e-6, rtol=0)  # the weights sum to 1 up to rounding


@pytest.mark.parametrize("use_entropy", [False, True])
def test_regularization_is_peft_s_variational_loss_with_a_gradient_to_every_sampler(use_entropy):
    model = moved(tiny_classifier("monteclora", r=R, use_entropy=use_entropy, kl_loss_weight=1e-2)).train()
    ids, mask = padded_batch()
    model(ids, mask)  # the draw the loss term reads (each sampler's last Σ and weights)
    penalty = model.method.regularization()
    assert penalty.shape == () and torch.isfinite(penalty) and penalty > 0
    torch.testing.assert_close(penalty, peft_loss(model), rtol=1e-5, atol=0)
    penalty.backward()
    samplers = [(name, p) for name, p in model.named_parameters() if SAMPLER in name]
    assert len(samplers) == 2 * 2 * 2  # s and e of query and value in each of the tiny BERT's 2 layers
    for name, p in samplers:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert model.eval().method.regularization() is None  # peft's term is 0 in evaluation


def test_the_dirichlet_term_stays_finite_where_peft_s_ratio_of_gammas_overflows():
    """32 samples: Σ a of about 55 at peft's start, whose Γ is beyond float32; its log Γ is not."""
    model = tiny_classifier("monteclora", r=R, num_samples=32).train()
    ids, mask = padded_batch()
    model(ids, mask)
    assert not torch.isfinite(torch.as_tensor(peft_loss(model)))
    assert torch.isfinite(model.method.regularization())


def test_nothing_to_add_where_the_loss_term_weighs_nothing():
    model = tiny_classifier("monteclora", r=R, kl_loss_weight=0.0).train()
    model(*padded_batch())
    assert model.method.regularization() is None


def test_a_smoke_run_trains_stores_its_sampler_and_its_rebuilt_model_reproduces_it(tmp_path):
    run = train(preset_config("smoke", "monteclora", method_options={"num_samples": 4}), runs_dir=tmp_path)
    assert run.status == "complete" and run.epochs_done == 2
    stored = load_file(run.params_path)
    model, tokenizer = load_trained(run, device="cpu")
    sampler = {name for name in model.trainable_state_dict() if SAMPLER in name}  # s and e of each map
    assert len(sampler) == 2 * len(model.method.samplers()) > 0 and sampler <= set(stored)
    assert all(torch.isfinite(stored[name]).all() for name in sampler)
    for split, epoch in (("validation", run.best_epoch), ("test", "test")):
        examples = tokenize(run_data(run).splits[split], tokenizer, run.config.max_length)
        probs, labels = predict(model, make_loader(examples, 8, tokenizer.pad_token_id), torch.device("cpu"))
        stored_probs, stored_labels = run.predictions(epoch)
        np.testing.assert_array_equal(labels, stored_labels)
        np.testing.assert_allclose(probs, stored_probs, atol=1e-6)


def test_a_run_exports_as_a_peft_adapter_with_its_monteclora_config_and_imports_back(tmp_path):
    base = base_folder(tmp_path / "base", "bert")
    options = {"r": R, "num_samples": 3, "sample_scaler": 1e-3, "use_entropy": True}
    run = smoke_run(tmp_path / "runs", "monteclora", base, **options)
    perturb_stored_params(run)
    exported = export_run(run, tmp_path / "exported")
    adapter = json.loads((exported / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["monteclora_config"] == {
        **MonteCLoRAConfig().monteclora_settings(),
        **{k: v for k, v in options.items() if k != "r"},
    }
    ours, tokenizer = load_trained(run, device="cpu")
    _, loader = split_loader(run, tokenizer)
    classifier = AutoModelForSequenceClassification.from_pretrained(base, num_labels=len(run.label_names))
    with quiet_peft_wrapping():
        theirs = PeftModel.from_pretrained(classifier, exported).eval()
    assert (logits_of(ours, loader, peft=False) - logits_of(theirs, loader, peft=True)).abs().max() <= 1e-5
    imported = import_model(ImportRequest(str(exported)), tmp_path / "runs")
    assert imported.config.method == "monteclora"
    assert imported.config.method_options == MonteCLoRAConfig.from_dict(run.config.method_options).to_dict()
    np.testing.assert_array_equal(imported.predictions("test")[1], run.predictions("test")[1])
    assert np.abs(imported.predictions("test")[0] - predict(ours, loader, torch.device("cpu"))[0]).max() <= 1e-6


def test_a_plain_lora_adapter_is_no_monteclora_adapter():
    with pytest.raises(ConfigError, match="^the adapter sets no monteclora_config"):
        METHODS["monteclora"].options_from_peft({"r": 4, "lora_alpha": 8, "target_modules": ["query", "value"]})


def test_a_noise_buffer_beyond_its_bound_is_refused_before_peft_draws_it():
    MonteCLoRAConfig.from_dict({"num_samples": 64})  # each option within its own bounds
    with pytest.raises(ConfigError, match=rf"^buffer_size · num_samples · r is 76800, beyond {MAX_BUFFERED} "):
        tiny_classifier("monteclora", num_samples=64)


# ---------------------------------------------------------------- hostile options

BAD_TYPES = st.sampled_from([None, "3", "", [], {}, [1], {"a": 1}])
BAD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 10**400])
HOSTILE = {  # option -> values it must refuse
    "num_samples": st.one_of(
        st.integers(max_value=0), st.integers(min_value=65), st.sampled_from([8.0, True, 1e308]), BAD_TYPES
    ),
    "buffer_size": st.one_of(st.integers(max_value=0), st.integers(min_value=1025), st.just(150.0), BAD_TYPES),
    "sample_scaler": st.one_of(
        st.floats(max_value=-1e-300), st.floats(min_value=1.0, exclude_min=True), BAD_NUMBERS, st.just(False), BAD_TYPES
    ),
    "kl_loss_weight": st.one_of(
        st.floats(max_value=-1e-300), st.floats(min_value=1.0, exclude_min=True), BAD_NUMBERS, BAD_TYPES
    ),
    "dirichlet_prior": st.one_of(
        st.floats(max_value=1e-6, exclude_max=True),
        st.floats(min_value=100.0, exclude_min=True),
        BAD_NUMBERS,
        BAD_TYPES,
    ),
    "use_entropy": st.one_of(st.sampled_from([0, 1, "true", 1.0]), BAD_TYPES),
}
MONTECLORA_ADAPTER = {
    "task_type": "SEQ_CLS",
    "peft_type": "LORA",
    "r": R,
    "lora_alpha": 8,
    "target_modules": ["query", "value"],
    "monteclora_config": MonteCLoRAConfig().monteclora_settings(),
}


@FUZZ
@given(st.sampled_from(sorted(HOSTILE)).flatmap(lambda name: st.tuples(st.just(name), HOSTILE[name])))
@each_case_within(10)
def test_a_hostile_option_is_refused_in_one_line_naming_it(hostile):
    name, value = hostile
    with pytest.raises(ConfigError) as refused:
        MonteCLoRAConfig.from_dict({"r": R, name: value})
    message = str(refused.value)
    assert message.startswith(f"{name} must be ") and "\n" not in message, message
    # the same value in the monteclora_config of an adapter a peftviz export names as monteclora: refused before
    # peft builds anything, the field named as the adapter names it
    adapter = {**MONTECLORA_ADAPTER, "monteclora_config": {**MONTECLORA_ADAPTER["monteclora_config"], name: value}}
    with pytest.raises(ExchangeError) as refused:
        adapter_method(adapter, "hostile", "monteclora")
    message = str(refused.value)
    assert message.startswith(f"hostile: adapter_config.json: monteclora_config.{name} must be "), message
    assert "\n" not in message
