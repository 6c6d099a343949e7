"""MonteCLoRA, Monte Carlo LoRA with a variational A (Seth et al., TMLR 2025), through Hugging Face peft.

LoRA (lora.py), h = W x + (α / r) · B A x, whose A is, while training, a Monte Carlo mixture of noisy copies
(Seth, Sengupta et al., "Robust and Efficient Fine-tuning of LLMs with Bayesian Reparameterization of Low-Rank
Adaptation", arXiv 2411.04358). For a targeted map W (d_out × d_in), A (r × d_in), B (d_out × r), each training
forward draws, per map,

    Σ = diag(max(σ_j² · (Z_W)_jj, 10⁻³))       σ = exp(s), Z_W ~ Wishart(r, I_r)           (r × r)
    E_n = c · Z_n Σ^½,  n = 1 … N               Z_n ~ N(0, 1)                               (d_in × r)
    w = softmax(μ + L z)                        μ = log a − mean(log a), a = exp(e),         (N)
                                                L Lᵀ = diag((1 − 2/N) / a + Σ_k (1/a_k) / N²), z ~ N(0, I_N)
    Ã = A + (Σ_n w_n E_n)ᵀ
    h = W x + (α / r) · B Ã dropout(x)

(w is the softmax-basis Laplace approximation of a Dirichlet(a) draw), and the loss adds, averaged over the M maps,

    R = (1 / M) Σ_maps [ λ · (KL_Dir(a; α₀) + KL_W(σ) + KL_N(Σ)) + [use_entropy] Σ_n w_n² ]
        KL_Dir = log Γ(Σ a) − log Γ(N α₀) + Σ_n (log Γ(a_n) − log Γ(α₀)) + Σ_n (a_n − α₀)(ψ(a_n) − ψ(Σ a))
        KL_W   = ½ (r · Σ_j (σ_j² − log σ_j²) − r²),     KL_N = (N / 2) · (tr Σ − Σ_j log Σ_jj − r)

with c = sample_scaler, λ = kl_loss_weight, α₀ = dirichlet_prior, N = num_samples; s (r) and e (N) are the
sampler's trained parameters besides A and B. In evaluation the sampler is off and the map is LoRA's, with the
trained A: predictions are deterministic, and a run's stored A, B (and s, e) rebuild them exactly.

All of it is peft's: `LoraConfig(monteclora_config=MontecloraConfig(...))` injects the LoRA layers with peft's
`MontecloraLinearVariant` and a `MontecloraSampler` per map (noise drawn buffer_size forwards at a time). What
peft leaves to its caller is the loss term, which peft's `LoraModel._get_monteclora_loss` adds up; the encoder
is no peft model, so `regularization` is that function's mean over the injected samplers, its Dirichlet term
written with log Γ differences: the same value as peft's, which takes the log of ratios of exp(log Γ) and so
overflows float32 once Σ a passes 35 (at peft's random start, a_n = exp(U(0, 1)): from N = 13 at worst, about
N = 21 on average). KL_Dir is peft's form, whose Σ log Γ term has the opposite sign to the textbook KL between
Dirichlets; it is kept as peft computes it.

Each training forward takes the sampler's next draw. Under gradient checkpointing a layer's recomputation in the
backward pass takes the draw after it, so that layer's gradients are those of another noise than the forward's
(a difference of the noise's own size, c · √Σ_jj, about 5 · 10⁻⁴ per entry at peft's defaults).

Exchange with peft: `monteclora_config` is a sub-config peft writes to adapter_config.json as an object and reads
back, and the sampler's s and e are among the adapter's tensors, so a run exports as a peft LoRA adapter with its
monteclora_config, and such an adapter, exported from peftviz, imports back as this method.

Bounds: LoRA's for r, α, dropout and targets; N from 1 to MAX_SAMPLES = 64 (8 times peft's default); c in
[0, 1] (peft's 10⁻⁴; a noise entry is up to about 5c at the start at r = 8, so at 1 it is a hundred times A's
Kaiming-uniform entries, about 0.03 on MiniLM); λ in [0, 1] (10⁵ times peft's 10⁻⁵: the KL terms then outweigh
the task's loss); α₀ in [10⁻⁶, 100] (positive, as peft asserts; from 10⁻⁶ on, since in float32 a far smaller α₀
rounds to 0, where log Γ is infinite); buffer_size from 1 to MAX_BUFFER = 1024. The sampler holds
buffer_size · N · d_in · r noise numbers per map, so buffer_size · N · r is at most MAX_BUFFERED = 65,536
(peft's defaults at r = 8: 9,600), which keeps each map's buffer within 100 MB at MiniLM's d_in of 384 (and
400 MB at a feed-forward output's 1,536). That rule across options is checked when the method is built, and
for an adapter before peft builds its samplers (`check_buffer`), not by the options themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch
from peft.tuners.lora.config import MontecloraConfig
from torch import Tensor, nn

from peftviz.errors import ConfigError
from peftviz.methods.lora import LoRA, LoraMethodConfig
from peftviz.methods.registration import registered
from peftviz.options import option, shown

MAX_SAMPLES = 64
MAX_BUFFER = 1024
MAX_BUFFERED = 65_536  # buffer_size · num_samples · r: the sampler's noise numbers per input feature of a map
# the options that are peft's MontecloraConfig's fields (the rest are LoRA's)
MONTECLORA_FIELDS = tuple(f.name for f in fields(MontecloraConfig))


@dataclass
class MonteCLoRAConfig(LoraMethodConfig):
    num_samples: int = option(
        8,
        "N, the noisy copies of A each training forward mixes by a Dirichlet-like draw of weights (peft's default: "
        "8); more give smoother training at more compute",
        at_least=1,
        at_most=MAX_SAMPLES,
    )
    sample_scaler: float = option(
        1e-4,
        "c, the scale of the sampled noise on A (peft's default: 1e-4); 0 leaves A as it is",
        at_least=0,
        at_most=1,
    )
    kl_loss_weight: float = option(
        1e-5,
        "λ, the weight of the KL terms between the sampler's distributions and their priors in the loss "
        "(peft's default: 1e-5)",
        at_least=0,
        at_most=1,
    )
    dirichlet_prior: float = option(
        0.1,
        "α₀, the concentration of the Dirichlet prior over the N weights (peft's default: 0.1); larger pulls "
        "them towards uniform, smaller towards a few samples",
        at_least=1e-6,
        at_most=100,
    )
    use_entropy: bool = option(
        False,
        "add Σ w_n², which keeps the weights from collapsing onto one sample, to the loss (peft's default: off)",
    )
    buffer_size: int = option(
        150,
        "noise draws the sampler makes at a time, held in memory: buffer_size · N · d_in · r numbers per map "
        "(peft's default: 150); buffer_size · N · r is at most 65536",
        at_least=1,
        at_most=MAX_BUFFER,
    )

    def check_buffer(self) -> None:
        """ConfigError where the sampler's noise buffer would hold more than MAX_BUFFERED numbers per input feature
        of a map. A rule across options that only building needs (`attach`, and an adapter before peft builds it:
        `check_peft_values`), not the options' `validate`: the options each stay valid within their own bounds."""
        held = self.buffer_size * self.num_samples * self.r
        if held > MAX_BUFFERED:
            raise ConfigError(
                f"buffer_size · num_samples · r is {held}, beyond {MAX_BUFFERED} (each map's noise buffer holds "
                "that many numbers per input feature): lower buffer_size"
            )

    def monteclora_settings(self) -> dict:
        """peft's MontecloraConfig fields, as these options set them."""
        return {name: getattr(self, name) for name in MONTECLORA_FIELDS}


@registered
class MonteCLoRA(LoRA):
    """input_ids (B, T) -> hidden (B, T, D), as the plain encoder; the targeted linear maps carry B A, with A a
    Monte Carlo mixture of noisy copies while training (see the module docstring), LoRA's A in evaluation.

    Parameters (all injected into the encoder; the method module itself owns none): LoRA's r · (d_in + d_out)
    per targeted map, and its sampler's s (r) and e (N): at the default query, value, L · 2 · (2·r·D + r + N).
    Buffers besides, not stored with a run (evaluation does not read them): each sampler's last Σ (r × r) and
    w (N), and its noise buffer (buffer_size · N · d_in · r numbers, outside the state dict).
    """

    config_class = MonteCLoRAConfig
    # peft's names of the options inside the adapter's sub-config: what `check_peft_values` names in refusals
    peft_names: ClassVar[dict[str, str]] = {name: f"monteclora_config.{name}" for name in MONTECLORA_FIELDS}

    def lora_settings(self) -> dict:
        return super().lora_settings() | {"monteclora_config": MontecloraConfig(**self.config.monteclora_settings())}

    def attach(self, encoder) -> None:
        self.config.check_buffer()  # before peft draws the first buffer
        super().attach(encoder)  # trains lora_A, lora_B and each sampler's s and e
        # a plain list, not a ModuleList: the samplers are the encoder's modules, not the method's own
        self._samplers = [
            module.lora_monteclora_sampler["default"]
            for module in encoder.modules()
            if "default" in getattr(module, "lora_monteclora_sampler", {})
        ]

    def remove_hooks(self) -> None:
        super().remove_hooks()
        self._samplers = []

    def samplers(self) -> list[nn.Module]:
        """peft's MontecloraSampler of each targeted map, in the encoder's order."""
        return list(getattr(self, "_samplers", []))

    def regularization(self) -> Tensor | None:
        """peft's `LoraModel._get_monteclora_loss`: the mean over the maps of λ · KL + entropy (module docstring).
        None where it weighs nothing, or in evaluation (peft's term is 0 there)."""
        if self.config.kl_loss_weight == 0 and not self.config.use_entropy:
            return None
        terms = [variational_loss(sampler) for sampler in self.samplers() if sampler.training]
        return torch.stack(terms).mean() if terms else None

    def peft_config(self) -> dict:
        return super().peft_config() | {"monteclora_config": self.config.monteclora_settings()}

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        """LoRA's options and those of the adapter's monteclora_config (peft's default where it lacks one);
        ConfigError for an adapter without one (a plain LoRA adapter) or with a field peft's MontecloraConfig lacks."""
        settings = adapter.get("monteclora_config")
        if not isinstance(settings, dict):
            raise ConfigError(f"the adapter sets no monteclora_config, which every {cls.name} adapter has")
        unknown = sorted((str(key) for key in settings if key not in MONTECLORA_FIELDS), key=str)
        if unknown:
            raise ConfigError(
                f"the adapter's monteclora_config sets {shown(unknown[0])}, which peft's MontecloraConfig does not have"
            )
        defaults = MonteCLoRAConfig().monteclora_settings()
        return super().options_from_peft(adapter) | {name: settings.get(name, defaults[name]) for name in defaults}

    @classmethod
    def check_peft_values(cls, adapter: dict, options: dict) -> None:
        """The options' checks, then the noise buffer's size (`check_buffer`), before peft builds the samplers."""
        super().check_peft_values(adapter, options)
        cls.config_class.from_dict(options).check_buffer()


def variational_loss(sampler) -> Tensor:
    """One sampler's term of peft's `_get_monteclora_loss`: its `get_variational_loss()` (training mode), λ · KL + the
    entropy term, with the Dirichlet KL in log Γ differences (`dirichlet_kl`). The Wishart and Gaussian terms are
    peft's own methods; Σ and w are those of the sampler's last draw (its buffers), as in peft."""
    kl = (
        dirichlet_kl(torch.exp(sampler.expert_weights_prior), sampler.dirichlet_prior)
        + sampler.wishart_kl(torch.diag(torch.exp(sampler.std_prior)))
        + sampler.multivariate_kl(sampler.gaussian_var_prior)
    )
    entropy = (sampler.expert_weights**2).sum() if sampler.use_entropy else 0.0
    return sampler.kl_loss_weight * kl + entropy


def dirichlet_kl(alpha: Tensor, prior: float) -> Tensor:
    """peft's `MontecloraSampler.dirichlet_kl(alpha)` against a Dirichlet of concentration `prior` in each of the
    N = len(alpha) coordinates, as log Γ differences: peft takes the logarithm of ratios of exp(log Γ), which are
    infinite in float32 from Γ(35.04) on. Its form, not the textbook KL (see the module docstring)."""
    base = torch.full_like(alpha, prior)
    return (
        torch.lgamma(alpha.sum())
        - torch.lgamma(base.sum())
        + (torch.lgamma(alpha) - torch.lgamma(base)).sum()
        + ((alpha - base) * (torch.digamma(alpha) - torch.digamma(alpha.sum()))).sum()
    )
