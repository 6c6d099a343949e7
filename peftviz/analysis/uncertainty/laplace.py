"""A Laplace approximation of a stored run's classifier, with laplace-torch (Daxberger et al., NeurIPS 2021).

The posterior. Training found θ_MAP, a minimum of the regularised loss L(θ) = Σ_n -log p(y_n | f(x_n; θ)) +
(λ/2)‖θ‖². Around it the posterior is approximated by a Gaussian whose precision is the loss's curvature:

    p(θ | D) ≈ N(θ_MAP, Σ),   Σ = (H + λ I)^{-1},   H = Σ_n J_nᵀ Λ_n J_n

H is the generalised Gauss-Newton matrix (GGN) of the data term at θ_MAP, J_n = ∂f(x_n; θ)/∂θ (C × P) the
Jacobian of the logits and Λ_n = diag(p_n) - p_n p_nᵀ the Hessian of the cross-entropy in the logits (for
softmax and cross-entropy the GGN equals the Fisher). λ, the prior precision, is chosen by maximising
laplace-torch's Laplace estimate of the marginal likelihood,

    log p(D | λ) ≈ -L_data(θ_MAP) - (λ/2)‖θ_MAP‖² - ½ log det(H + λ I) + (P/2) log λ,

over a scalar λ (100 Adam steps on log λ from λ = 1: `optimize_prior_precision(method="marglik")`).
`hessian` says how H is stored: "full" (P × P), "kron" (Kronecker-factored, K-FAC: per linear map with weight
W (C_out × C_in), H_W ≈ B ⊗ A with A = Σ a aᵀ over the map's inputs (C_in × C_in) and B = Σ g gᵀ over the
logits' curvature back-propagated to its outputs (C_out × C_out); a bias gets B alone), or "diag".

The predictive is the GLM one (Immer et al., AISTATS 2021): the network linearised at θ_MAP,
f(x; θ) ≈ f(x; θ_MAP) + J(x)(θ - θ_MAP), so the logits are Gaussian,

    f(x) ~ N(μ(x), S(x)),   μ(x) = f(x; θ_MAP),   S(x) = J(x) Σ J(x)ᵀ   (C × C)

and p(y | x) = E[softmax(f)] is taken either with the probit approximation (MacKay 1992; laplace-torch's
"probit", applied per class)

    p(y | x) ≈ softmax(μ(x) / sqrt(1 + (π/8) diag S(x)))

or by Monte Carlo ("mc"): the mean of softmax(μ + L ε_s) over s = 1..samples, L Lᵀ = S, ε_s ~ N(0, I_C).
The draws are seeded (a torch.Generator seeded with `seed` on the model's device, per split), so predictions
repeat; laplace-torch draws one ε_s per sample for all documents of a call, so a split is predicted in chunks
of PREDICT_ROWS documents (last layer) or in the loader's batches (adapter), in order.

Which weights (`subset`):

* "last-layer" (Kristiadi et al., ICML 2020; Laplace-LoRA's last-layer baseline): θ = the head's final linear
  map `head.out_proj` (W: C × D and b: C, P = C·(D + 1)); everything below it is fixed at the MAP. Its input
  φ(x) = tanh(dense(pooled)) (the head in eval mode: dropout off) does not depend on θ, and f = W φ + b is
  linear in θ, so J(x) = [φ(x)ᵀ ⊗ I_C, I_C] and the linearisation is exact. laplace-torch's own last-layer
  Laplace (`subset_of_weights="last_layer"` on the whole model) runs the backbone on every training batch
  while it fits, and again while it predicts; peftviz computes φ once per split (one backbone pass per
  document, `features`), and fits laplace-torch's `subset_of_weights="all"` Laplace on a copy of `out_proj`
  alone, over a TensorDataset of (φ, y) batched as the training loader is (K-FAC sums its factors batch by
  batch, so the batches are the same). The test suite shows this equal to laplace-torch's own last-layer
  Laplace on the whole classifier (tests/analysis/test_laplace.py).
* "adapter" (Laplace-LoRA, Yang et al., ICLR 2024): θ = every weight the run trained, the method's and the
  head's, with laplace-torch's `subset_of_weights="all"` on the whole classifier (a wrapper taking the
  loader's batches) and its default backend, curvlinops. It needs every trained weight in an `nn.Linear` that
  trains all its parameters and runs as a module (the forward hooks of curvlinops' K-FAC must see it): LoRA
  and the methods built like it; any other method is refused with one ConfigError line naming it. With "kron"
  each linear map gets its K-FAC factors (LoRA's A: r × r and D × D, B: D × D and r × r); "diag" uses
  laplace-torch's exact GGN diagonal from the Jacobians. "full" is refused: P² numbers (LoRA r = 8 on a
  MiniLM's query and value maps and the head: P ≈ 223,000) and curvlinops' GGN products use forward-mode
  autodiff, which torch's CPU scaled-dot-product attention does not implement. The GLM predictive needs
  J(x), computed by laplace-torch with torch.func.jacrev: one forward and C backward passes per batch.
  Measured on CPU (2 threads), LoRA on the MiniLM, 16 documents of 128 tokens: a plain forward pass 2.7 s,
  the K-FAC fit 28 s, the GLM predictive 69 s (torch has no batching rule for the attention's backward, so
  jacrev's C backward passes fall back to a loop). A small model from config fits and predicts in seconds.

What peftviz adds to laplace-torch: the features shortcut above; `LaplaceOptions` (checked like every
setting: one ConfigError line); seeded Monte Carlo draws; the cost (`laplace_extra_parameters`: the numbers
the posterior adds, each symmetric n × n matrix counted as n(n + 1)/2: "full" P(P + 1)/2, "kron" the K-FAC
factors', "diag" P; `laplace_passes`: the backbone passes per predicted document); and the uncertainty method
`Laplace`, whose members are cached in the run folder like every other's.

laplace-torch is imported only inside the functions that use it (importing it takes ~3 s), so importing this
module stays light.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from peftviz.analysis.uncertainty.base import Cost, Member, Progress, UncertaintyMethod
from peftviz.analysis.uncertainty.cache import per_run_members
from peftviz.analysis.uncertainty.model_runs import per_1000, split_loaders, timed, with_model
from peftviz.errors import ConfigError
from peftviz.options import Options, option
from peftviz.store.runs import Group, Run

if TYPE_CHECKING:
    from laplace.baselaplace import ParametricLaplace

MAX_SAMPLES = 10_000  # Monte Carlo draws of the C logits: a C-dimensional Gaussian each, no forward pass
PREDICT_ROWS = 256  # documents per predictive call on features: Jacobians of (rows, C, C·(D + 1)) numbers
LAST_LAYER = "head.out_proj"  # the classifier's final linear map, what the last-layer Laplace covers


@dataclass
class LaplaceOptions(Options):
    subset: Literal["last-layer", "adapter"] = option(
        "last-layer",
        "the weights the posterior covers: last-layer (the head's final linear map, the backbone fixed) or adapter "
        "(every trained weight, the method's and the head's, as Laplace-LoRA; methods whose trained weights all sit "
        "in linear layers)",
    )
    hessian: Literal["kron", "full", "diag"] = option(
        "kron",
        "laplace-torch's hessian_structure: kron (Kronecker-factored GGN, K-FAC), full (dense, last-layer only), diag",
    )
    predictive: Literal["probit", "mc"] = option(
        "probit",
        "the GLM predictive's link approximation: probit, softmax(mu / sqrt(1 + pi/8 var)), or mc (the mean of "
        "softmax over `samples` Gaussian draws of the logits)",
    )
    samples: int = option(
        100,
        "Monte Carlo draws of the logits with predictive=mc (laplace-torch's default: 100)",
        at_least=1,
        at_most=MAX_SAMPLES,
    )
    seed: int = option(0, "seed of the Monte Carlo draws", at_least=0, at_most=2**31 - 1)

    def validate(self) -> None:
        if self.subset == "adapter" and self.hessian == "full":
            raise ValueError(
                "hessian full is last-layer only: over the adapter's weights it needs P² numbers, and curvlinops' "
                "GGN needs forward-mode autodiff, which the CPU attention lacks; use kron or diag"
            )


@dataclass
class FittedLaplace:
    """laplace-torch's fitted posterior (`posterior`: a Full-, Kron- or DiagLaplace) and the options it was fit
    with; the last-layer posterior covers a copy of `head.out_proj` and reads features, the adapter posterior
    covers the classifier (through `ClassifierOnBatches`) and reads the loader's batches."""

    posterior: ParametricLaplace
    options: LaplaceOptions
    device: torch.device


class ClassifierOnBatches(nn.Module):
    """The classifier as laplace-torch calls a model on dict batches: forward(batch) -> logits (b, C), the
    batch's tensors moved to the classifier's device."""

    def __init__(self, classifier: nn.Module, device: torch.device):
        super().__init__()
        self.classifier = classifier
        self.device = device

    def forward(self, batch: dict) -> Tensor:
        ids, mask = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
        return self.classifier(ids, mask).logits


# ---------------------------------------------------------------------------------------------
# the last layer's features


@torch.no_grad()
def features(model: nn.Module, loader, device: torch.device) -> tuple[Tensor, Tensor]:
    """What `head.out_proj` reads, φ(x) = tanh(dense(pooled)) in eval mode, (N, D) float32 on `device`, and the
    labels (N,) int64 on `device`, in the loader's order: one backbone pass per document."""
    was_training = model.training
    model.eval()
    found: list[Tensor] = []
    hook = model.get_submodule(LAST_LAYER).register_forward_hook(lambda _, inputs, __: found.append(inputs[0]))
    labels = []
    try:
        for batch in loader:
            model(batch["input_ids"].to(device), batch["attention_mask"].to(device))
            labels.append(batch["labels"].to(device))
    finally:
        hook.remove()
        model.train(was_training)
    return torch.cat(found).float(), torch.cat(labels).long()


# ---------------------------------------------------------------------------------------------
# fitting


def fit_last_layer(model: nn.Module, train_loader, device: torch.device, options: LaplaceOptions) -> FittedLaplace:
    """laplace-torch's Laplace over a float32 copy of `head.out_proj`, fit on the training split's features
    (batched as `train_loader`), its prior precision by marginal likelihood."""
    from laplace import Laplace as laplace_torch

    phi, labels = features(model, train_loader, device)
    last = copy.deepcopy(model.get_submodule(LAST_LAYER)).float().requires_grad_(True)
    posterior = laplace_torch(last, "classification", subset_of_weights="all", hessian_structure=options.hessian)
    batch_size = train_loader.batch_size or len(labels)
    _fit(posterior, DataLoader(TensorDataset(phi, labels), batch_size=batch_size), options)
    return FittedLaplace(posterior, options, device)


def fit_adapter(model: nn.Module, train_loader, device: torch.device, options: LaplaceOptions) -> FittedLaplace:
    """laplace-torch's Laplace over every trained weight of `model` (the method's and the head's), fit on the
    training loader's batches; ConfigError where a trained weight is not in a linear map K-FAC covers."""
    from laplace import Laplace as laplace_torch

    model.eval()
    check_adapter_support(model, next(iter(train_loader)), device)
    wrapper = ClassifierOnBatches(model, device)
    posterior = laplace_torch(
        wrapper,
        "classification",
        subset_of_weights="all",
        hessian_structure=options.hessian,
        dict_key_x="input_ids",
        dict_key_y="labels",
    )
    _fit(posterior, train_loader, options)
    model.zero_grad(set_to_none=True)  # the fit's backward passes leave gradients on the weights
    return FittedLaplace(posterior, options, device)


def fit_laplace(model: nn.Module, train_loader, device: torch.device, options: LaplaceOptions) -> FittedLaplace:
    """`fit_last_layer` or `fit_adapter`, as `options.subset` says."""
    fit = fit_adapter if options.subset == "adapter" else fit_last_layer
    return fit(model, train_loader, device, options)


def _fit(posterior, loader, options: LaplaceOptions) -> None:
    posterior.fit(loader)
    with warnings.catch_warnings():  # laplace-torch reminds that the prior was tuned for the probit link
        warnings.simplefilter("ignore", UserWarning)
        posterior.optimize_prior_precision(
            method="marglik", pred_type="glm", link_approx=options.predictive, n_samples=options.samples
        )


def trained_linear_maps(model: nn.Module) -> dict[str, nn.Linear]:
    """name -> module of every module holding a trained parameter; ConfigError naming the method where one is not
    an nn.Linear training all its parameters (laplace-torch's K-FAC factors assume both weight and bias)."""
    found = {}
    for name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        trained = [pname for pname, p in own if p.requires_grad]
        if not trained:
            continue
        if not isinstance(module, nn.Linear) or len(trained) != len(own):
            what = f"{name}.{trained[0]}" if name else trained[0]
            kind = (
                type(module).__name__
                if not isinstance(module, nn.Linear)
                else "linear map also holding a frozen weight"
            )
            raise ConfigError(
                f"laplace subset adapter: {_method_name(model)} trains {what} in a {kind}, and laplace-torch's "
                "Kronecker factors cover linear maps that train all their weights; use subset last-layer"
            )
        found[name] = module
    return found


def check_adapter_support(model: nn.Module, batch: dict, device: torch.device) -> None:
    """ConfigError unless every trained weight sits in an nn.Linear (`trained_linear_maps`) that one forward pass
    on `batch` calls as a module (curvlinops' K-FAC reads each map's inputs and output gradients by hooks)."""
    maps = trained_linear_maps(model)
    called: set[str] = set()
    hooks = [module.register_forward_hook(lambda *_, name=name: called.add(name)) for name, module in maps.items()]
    try:
        with torch.no_grad():
            model(batch["input_ids"][:1].to(device), batch["attention_mask"][:1].to(device))
    finally:
        for hook in hooks:
            hook.remove()
    missed = sorted(set(maps) - called)
    if missed:
        raise ConfigError(
            f"laplace subset adapter: {_method_name(model)} uses the weight of {missed[0]} without calling the "
            "module, which laplace-torch's Kronecker factors need; use subset last-layer"
        )


def _method_name(model: nn.Module) -> str:
    method = getattr(model, "method", None)
    return getattr(method, "name", None) or type(model).__name__


# ---------------------------------------------------------------------------------------------
# predicting


def laplace_probs(fitted: FittedLaplace, inputs, seed: int | None = None) -> np.ndarray:
    """The GLM predictive p(y | x), (N, C) float32, in order: `inputs` are the features (N, D) of the last-layer
    posterior, or a loader of batches for the adapter posterior. `seed` (default: the options') seeds the
    Monte Carlo draws; the probit predictive draws nothing."""
    options = fitted.options
    chunks = torch.split(inputs, PREDICT_ROWS) if isinstance(inputs, Tensor) else inputs
    generator = None
    if options.predictive == "mc":
        generator = torch.Generator(device=_posterior_device(fitted)).manual_seed(
            options.seed if seed is None else seed
        )
    found = []
    for chunk in chunks:
        found.append(_chunk_probs(fitted.posterior, chunk, options, generator).float().cpu())
    return torch.cat(found).numpy().astype(np.float32)


def _chunk_probs(posterior, chunk, options: LaplaceOptions, generator) -> Tensor:
    if options.predictive == "probit":
        return posterior(chunk, pred_type="glm", link_approx="probit")
    draws = posterior.predictive_samples(chunk, pred_type="glm", n_samples=options.samples, generator=generator)
    return draws.mean(0)  # (samples, b, C) softmax draws -> (b, C)


def _posterior_device(fitted: FittedLaplace) -> torch.device:
    return next(fitted.posterior.model.parameters()).device


def laplace_predictions(
    model: nn.Module, loaders: dict[str, Any], train_loader, device: torch.device, options: LaplaceOptions
) -> dict[str, np.ndarray]:
    """Fit on `train_loader`, then split name -> (N, C) float32 probabilities for each of `loaders`."""
    fitted = fit_laplace(model, train_loader, device, options)
    return {name: split_probs(fitted, model, loader, device) for name, loader in loaders.items()}


def split_probs(fitted: FittedLaplace, model: nn.Module, loader, device: torch.device) -> np.ndarray:
    """One split's predictive: its features, then the posterior (last layer); or the posterior on its batches."""
    if fitted.options.subset == "adapter":
        return laplace_probs(fitted, loader)
    phi, _ = features(model, loader, device)
    return laplace_probs(fitted, phi)


# ---------------------------------------------------------------------------------------------
# cost


def laplace_passes(options: LaplaceOptions, num_labels: int) -> int:
    """Backbone passes per predicted document: 1 for the last layer (its features); the adapter's Jacobian takes
    one forward and one backward pass per class (laplace-torch's jacrev), 1 + C."""
    return 1 if options.subset == "last-layer" else 1 + num_labels


def laplace_extra_parameters(fitted_or_model: FittedLaplace | nn.Module, options: LaplaceOptions) -> int:
    """The numbers the posterior adds to the trained weights (the MAP is its mean), a symmetric n × n matrix
    counting n(n + 1)/2: "full" P(P + 1)/2, "kron" the Kronecker factors', "diag" P. From a fitted posterior,
    read off laplace-torch's own H; from a classifier, from laplace-torch's factor layout of the weights it
    would cover (`Kron.init_from_model`, on the meta device: no memory)."""
    if isinstance(fitted_or_model, FittedLaplace):
        posterior = fitted_or_model.posterior
        if options.hessian == "kron":
            return _kron_count(posterior.H_facs.kfacs)
        if options.hessian == "full":
            return _symmetric(posterior.H.shape[0])
        return posterior.H.numel()
    from laplace.utils import Kron

    params = _covered(fitted_or_model, options)
    if options.hessian == "kron":
        return _kron_count(Kron.init_from_model(params, torch.device("meta"), torch.float32).kfacs)
    n_params = sum(p.numel() for p in params)
    return _symmetric(n_params) if options.hessian == "full" else n_params


def _covered(model: nn.Module, options: LaplaceOptions) -> list[nn.Parameter]:
    if options.subset == "last-layer":
        return list(model.get_submodule(LAST_LAYER).parameters())
    trained_linear_maps(model)  # ConfigError where the adapter posterior is not available
    return [p for p in model.parameters() if p.requires_grad]


def _kron_count(kfacs: list[list[Tensor]]) -> int:
    return sum(_symmetric(factor.shape[0]) for block in kfacs for factor in block)


def _symmetric(n: int) -> int:
    return n * (n + 1) // 2


# ---------------------------------------------------------------------------------------------
# the uncertainty method


def laplace_member(run: Run, options: LaplaceOptions) -> Member:
    """The run's Laplace posterior, fit on its training split; its predictive on validation and test, the
    test's timed (features and predictive)."""

    def compute(model, tokenizer, device) -> Member:
        loaders = split_loaders(run, tokenizer, ("train", "validation", "test"))
        fitted = fit_laplace(model, loaders["train"], device, options)
        validation = split_probs(fitted, model, loaders["validation"], device)
        test, seconds = timed(lambda: split_probs(fitted, model, loaders["test"], device))
        cost = Cost(
            laplace_passes(options, model.num_labels),
            laplace_extra_parameters(fitted, options),
            per_1000(seconds, len(test)),
        )
        return Member((run,), run.seed, validation, test, cost)

    return with_model(run, compute)


class Laplace(UncertaintyMethod):
    name = "laplace"
    title = "Laplace approximation (laplace-torch): a Gaussian posterior at the trained weights, GLM predictive"
    options_class = LaplaceOptions
    needs_params = True

    @classmethod
    def describe(cls, options: LaplaceOptions) -> str:
        link = f"mc, S = {options.samples}" if options.predictive == "mc" else "probit"
        return f"laplace, {options.subset}, {options.hessian}, {link}"

    @classmethod
    def members(cls, group: Group, options: LaplaceOptions, progress: Progress | None = None) -> list[Member]:
        return per_run_members(
            cls.name,
            options.to_dict(),
            __name__,
            group,
            partial(laplace_member, options=options),
            progress,
            cls.describe(options),
        )
