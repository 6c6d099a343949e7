"""The Laplace approximation (`peftviz.analysis.uncertainty.laplace`) against laplace-torch's own last-layer Laplace,
on a simulated overconfident problem, under hostile options, and over an adapter's weights."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import DataLoader

from peftviz.analysis.uncertainty.laplace import (
    PREDICT_ROWS,
    FittedLaplace,
    LaplaceOptions,
    features,
    fit_adapter,
    fit_last_layer,
    laplace_extra_parameters,
    laplace_passes,
    laplace_predictions,
    laplace_probs,
)
from peftviz.calibration.estimators import point_estimates
from peftviz.errors import ConfigError
from peftviz.options import breaks_lines
from peftviz.training.inference import make_loader
from tests.support.helpers import FUZZ, tiny_classifier

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
C = 3  # classes of the tiny classifiers


def token_examples(n: int, seed: int) -> list[dict]:
    """n documents of 4 to 14 random token ids (no special or pad ids), labels in 0..C-1."""
    rng = np.random.default_rng(seed)
    return [
        {"input_ids": rng.integers(5, 120, rng.integers(4, 15)).tolist(), "label": int(rng.integers(C))}
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def classifier(one_thread):
    """A tiny BERT with LoRA, its final linear map scaled up so that the predictions are far from uniform."""
    model = tiny_classifier("lora", num_labels=C)
    with torch.no_grad():
        model.head.out_proj.weight.mul_(8.0)
    return model


@pytest.fixture(scope="module")
def loaders() -> dict[str, DataLoader]:
    """train: 40 documents in batches of 8 (the last one of 3: 43 in all); test: 30, in batches of 7."""
    return {
        "train": make_loader(token_examples(43, seed=0), batch_size=8, pad_id=0),
        "test": make_loader(token_examples(30, seed=1), batch_size=7, pad_id=0),
    }


class OnBatches(nn.Module):
    """The classifier as laplace-torch's own Laplace calls it: forward(dict batch) -> logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: dict) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"]).logits


def reference(model: nn.Module, loaders: dict, hessian: str):
    """laplace-torch's own last-layer Laplace on the whole classifier, fitted on the same training batches, its prior
    precision by marginal likelihood, as peftviz does; and the test split as one batch."""
    from laplace import Laplace

    posterior = Laplace(
        OnBatches(model),
        "classification",
        subset_of_weights="last_layer",
        hessian_structure=hessian,
        last_layer_name="model.head.out_proj",
    )
    posterior.fit(loaders["train"])
    with pytest.warns(UserWarning, match="link_approx"):
        posterior.optimize_prior_precision(method="marglik", pred_type="glm", link_approx="probit")
    test = next(iter(make_loader(token_examples(30, seed=1), batch_size=30, pad_id=0)))  # one batch, padded alike
    return posterior, test


# ---------------------------------------------------------------- the must-show: laplace-torch's own predictive


@pytest.mark.parametrize("hessian", ["kron", "full", "diag"])
def test_the_predictive_equals_laplace_torch_s_own_last_layer_laplace(classifier, loaders, hessian):
    """The features shortcut (a Laplace over a copy of out_proj, fitted on the training features) gives laplace-torch's
    own last-layer Laplace on the whole classifier: the same prior precision, the same probit and Monte Carlo
    predictive (measured: a max abs difference of 0 on this machine; bound 1e-5)."""
    ours = LaplaceOptions(hessian=hessian)
    fitted = fit_last_layer(classifier, loaders["train"], CPU, ours)
    posterior, test = reference(classifier, loaders, hessian)
    assert torch.allclose(fitted.posterior.prior_precision, posterior.prior_precision, rtol=1e-5, atol=0)

    phi, labels = features(classifier, loaders["test"], CPU)
    assert phi.shape == (30, 32) and labels.tolist() == test["labels"].tolist()
    probs = laplace_probs(fitted, phi)
    expected = posterior(test, pred_type="glm", link_approx="probit").numpy()
    assert probs.dtype == np.float32 and probs.shape == (30, C)
    assert np.abs(probs - expected).max() <= 1e-5
    map_probs = classifier(test["input_ids"], test["attention_mask"]).logits.softmax(-1).detach().numpy()
    assert np.abs(probs - map_probs).max() > 1e-3  # the posterior changes the predictions: the check has teeth

    sampled = FittedLaplace(fitted.posterior, LaplaceOptions(hessian=hessian, predictive="mc", samples=50, seed=7), CPU)
    draws = posterior.predictive_samples(test, n_samples=50, generator=torch.Generator().manual_seed(7))
    assert 30 <= PREDICT_ROWS  # one chunk: laplace-torch draws once per call
    assert np.abs(laplace_probs(sampled, phi) - draws.mean(0).numpy()).max() <= 1e-5


def test_the_extra_parameters_are_laplace_torch_s_posterior_numbers(classifier, loaders):
    """From a fitted posterior and from the classifier alone, the same count: out_proj has P = C (D + 1) = 99
    weights; full: P (P + 1)/2; kron: the factors C × C and D × D of the weight, C × C of the bias; diag: P."""
    D, P = 32, C * 33
    expected = {"full": P * (P + 1) // 2, "kron": 6 + D * (D + 1) // 2 + 6, "diag": P}
    for hessian, count in expected.items():
        options = LaplaceOptions(hessian=hessian)
        fitted = fit_last_layer(classifier, loaders["train"], CPU, options)
        assert laplace_extra_parameters(fitted, options) == laplace_extra_parameters(classifier, options) == count
    assert laplace_passes(LaplaceOptions(), C) == 1
    assert laplace_passes(LaplaceOptions(subset="adapter"), C) == 1 + C


# ---------------------------------------------------------------- the direction, where the truth is known


class LinearSoftmax(nn.Module):
    """A classifier that is its last layer: forward(x, mask) -> logits = out_proj(x), for simulated features."""

    def __init__(self, d: int, c: int):
        super().__init__()
        self.head = nn.Module()
        self.head.out_proj = nn.Linear(d, c)

    def forward(self, x, attention_mask):
        return types.SimpleNamespace(logits=self.head.out_proj(x))


def feature_loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> DataLoader:
    rows = [{"input_ids": x[i], "attention_mask": torch.ones(1), "labels": y[i]} for i in range(len(y))]
    return DataLoader(
        rows, batch_size=batch_size, collate_fn=lambda b: {k: torch.stack([r[k] for r in b]) for k in b[0]}
    )


def noisy_linear_data(n: int, truth: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian features; the label the true linear map's argmax, replaced by a uniform one with probability 0.3."""
    x = torch.randn(n, truth.shape[1], generator=g)
    y = (x @ truth.T).argmax(-1)
    noise = torch.rand(n, generator=g) < 0.3
    return x, torch.where(noise, torch.randint(0, truth.shape[0], (n,), generator=g), y)


@pytest.fixture(scope="module")
def overconfident(one_thread):
    """100 training points in 20 dimensions with 30% label noise, fitted without weight decay to a MAP that is far
    too sure of itself (test: 3,000 points of the same distribution)."""
    g = torch.Generator().manual_seed(0)
    truth = torch.randn(C, 20, generator=g)
    train, test = noisy_linear_data(100, truth, g), noisy_linear_data(3000, truth, g)
    torch.manual_seed(0)
    model = LinearSoftmax(20, C)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(2000):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(train[0], None).logits, train[1]).backward()
        optimizer.step()
    return model.eval(), train, test


@pytest.mark.parametrize(
    ("hessian", "predictive", "at_most"),
    [("kron", "probit", (0.15, 1.05)), ("full", "probit", (0.14, 1.03)), ("diag", "mc", (0.18, 1.21))],
)
def test_the_laplace_predictive_is_better_calibrated_than_the_overconfident_map(
    overconfident, hessian, predictive, at_most
):
    """The MAP: accuracy 0.587, ECE 0.238, NLL 1.448. The Laplace predictive keeps the accuracy and cuts both
    (measured, seed 0: kron/probit ECE 0.141, NLL 1.040; full/probit 0.133, 1.020; diag/mc 0.172, 1.199)."""
    model, (x, y), (x_test, y_test) = overconfident
    with torch.no_grad():
        map_probs = model(x_test, None).logits.softmax(-1).numpy()
    metrics = ["accuracy", "ece", "nll"]
    before = point_estimates(map_probs, y_test.numpy(), 15, "width", metrics=metrics)
    assert before["ece"] > 0.23 and before["nll"] > 1.4
    options = LaplaceOptions(hessian=hessian, predictive=predictive)
    probs = laplace_predictions(
        model, {"test": feature_loader(x_test, y_test, 256)}, feature_loader(x, y, 32), CPU, options
    )
    after = point_estimates(probs["test"], y_test.numpy(), 15, "width", metrics=metrics)
    assert abs(after["accuracy"] - before["accuracy"]) < 0.01
    assert after["ece"] < at_most[0] and after["nll"] < at_most[1]


# ---------------------------------------------------------------- seeded Monte Carlo


def test_the_monte_carlo_predictive_repeats_with_its_seed_and_changes_with_another(classifier, loaders):
    fitted = fit_last_layer(classifier, loaders["train"], CPU, LaplaceOptions(predictive="mc", samples=20, seed=3))
    phi, _ = features(classifier, loaders["test"], CPU)
    first, again, other = laplace_probs(fitted, phi), laplace_probs(fitted, phi), laplace_probs(fitted, phi, seed=4)
    np.testing.assert_array_equal(first, again)
    assert np.abs(first - other).max() > 1e-4
    np.testing.assert_allclose(first.sum(1), 1, atol=1e-6)
    torch.manual_seed(123)  # the global generator plays no part
    np.testing.assert_array_equal(laplace_probs(fitted, phi), first)


# ---------------------------------------------------------------- hostile options


def not_one_of(choices: tuple) -> st.SearchStrategy:
    anything = st.one_of(st.text(max_size=20), st.integers(), st.floats(), st.booleans(), st.none(), st.just([]))
    return anything.filter(lambda value: not any(type(value) is str and value == c for c in choices))


HOSTILE = {
    "subset": not_one_of(("last-layer", "adapter")),
    "hessian": not_one_of(("kron", "full", "diag")),
    "predictive": not_one_of(("probit", "mc")),
    "samples": st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=10_001),
        st.just(10**400),
        st.floats(),
        st.booleans(),
        st.text(max_size=5),
        st.none(),
    ),
    "seed": st.one_of(st.integers(max_value=-1), st.integers(min_value=2**31), st.floats(), st.booleans()),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@FUZZ
@given(data=st.data())
def test_a_bad_option_is_one_config_error_line_naming_it(name, data):
    value = data.draw(HOSTILE[name])
    with pytest.raises(ConfigError) as refused:
        LaplaceOptions.from_dict({name: value})
    message = str(refused.value)
    assert message.startswith(f"{name} must be ") and not breaks_lines(message)


def test_options_refused_together_or_unknown_are_one_line_each():
    with pytest.raises(ConfigError, match=r"^hessian full is last-layer only: .*use kron or diag$"):
        LaplaceOptions(subset="adapter", hessian="full")
    with pytest.raises(ConfigError, match=r"^LaplaceOptions has no option\(s\) prior; options: hessian, "):
        LaplaceOptions.from_dict({"prior": "gridsearch"})
    assert LaplaceOptions.from_dict({}) == LaplaceOptions("last-layer", "kron", "probit", 100, 0)


# ---------------------------------------------------------------- the adapter's weights (Laplace-LoRA)


@pytest.mark.parametrize("hessian", ["kron", "diag"])
def test_the_adapter_posterior_covers_every_trained_weight(one_thread, loaders, hessian):
    """Over LoRA's A and B and the head, K-FAC or the GGN diagonal; the predictive is probabilities near the MAP's."""
    model = tiny_classifier("lora", num_labels=C)
    options = LaplaceOptions(subset="adapter", hessian=hessian)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    probs = laplace_predictions(model, {"test": loaders["test"]}, loaders["train"], CPU, options)["test"]
    assert probs.dtype == np.float32 and probs.shape == (30, C)
    np.testing.assert_allclose(probs.sum(1), 1, atol=1e-5)
    batches = list(loaders["test"])
    with torch.no_grad():
        map_probs = torch.cat([model(b["input_ids"], b["attention_mask"]).logits.softmax(-1) for b in batches])
    assert (probs.argmax(1) == map_probs.argmax(1).numpy()).mean() > 0.8
    assert all(p.grad is None for p in model.parameters())  # the fit's gradients are not left behind
    fitted = fit_adapter(model, loaders["train"], CPU, options)
    assert fitted.posterior.n_params == trained
    assert laplace_extra_parameters(fitted, options) == laplace_extra_parameters(model, options)


@pytest.mark.parametrize("method", ["prefix-tuning", "bitfit", "ia3"])
def test_the_adapter_posterior_is_refused_for_weights_outside_linear_maps(one_thread, loaders, method):
    model = tiny_classifier(method, num_labels=C)
    options = LaplaceOptions(subset="adapter")
    with pytest.raises(ConfigError, match=rf"^laplace subset adapter: {method} trains .*; use subset last-layer$"):
        fit_adapter(model, loaders["train"], CPU, options)
    with pytest.raises(ConfigError, match=rf"^laplace subset adapter: {method} trains "):
        laplace_extra_parameters(model, options)


def test_a_linear_map_whose_weight_is_used_without_the_module_is_refused(loaders):
    """curvlinops' K-FAC sees a linear map through its module's hooks: one read as a bare weight is refused."""

    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(120, 4).requires_grad_(False)
            self.head = nn.Module()
            self.head.out_proj = nn.Linear(4, C)

        def forward(self, ids, mask):
            pooled = self.embed(ids).mean(1)
            return types.SimpleNamespace(logits=nn.functional.linear(pooled, self.head.out_proj.weight))

    with pytest.raises(ConfigError, match=r"^laplace subset adapter: Bare uses the weight of head.out_proj without "):
        fit_adapter(Bare(), loaders["train"], CPU, LaplaceOptions(subset="adapter"))


def test_importing_the_module_leaves_laplace_torch_unloaded():
    """laplace-torch takes seconds to import: only fitting and counting load it."""
    code = "import sys, peftviz.analysis.uncertainty.laplace\nprint('laplace' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
