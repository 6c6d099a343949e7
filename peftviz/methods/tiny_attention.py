"""The tiny-attention adapter (Zhao et al., EMNLP 2022).

Per layer, M attention heads of per-head size D (paper: D = 1) read the intermediate states z:

    q_t = W_Q^(m) z_t,  k_s = W_K^(m) z_s,  v_s = W_V^(m) z_s          (eq. 4, W: D × H per head)
    z̃_t^(m) = Σ_s softmax_s(q_t·k_s / √D) v_s                          (eq. 3)
    z̃_t = O [z̃_t^(1); …; z̃_t^(M)] = Σ_m O^(m) z̃_t^(m)                  (eqs. 1a, 2)

"sequential" (the paper's main setting): z is the attention block's output after its residual
and LayerNorm, and z + z̃ goes on to the FFN. "parallel": the adapter reads the block's input x
and z̃ is added to the block's output. O starts tiny, U(±0.01/√D), so training starts from the
pretrained model.

Parameter averaging (eqs. 5–8): after training, W_Q, W_K, W_V are averaged over heads and one
head runs with output projection M·Ō = Σ_m O^(m). It is exact when the heads are equal, and close
when they started as perturbed copies of one trained head, which `init_from` provides (appendix B:
"we only need to initialize the weight of every head to be almost the same"):

    W^(m) = W + p · std(W) · ε^(m),   O^(m) = O / M + p · std(O / M) · ε^(m),   ε ~ N(0, 1)

so every matrix of every head moves by the same fraction p, the 4-head adapter starts as the
1-head one up to that noise, and two heads start at cosine ≈ 1 / (1 + p²). The heads only become
different experts through their different starts: copies that start nearly equal get nearly
equal gradients, and AdamW's per-coordinate steps then move them alike. With p = 0.01 the quick
comparison's heads started at cosine 0.9999 and ended at 0.9998 (averaging changed ECE by 1e-4);
the default p = 0.1 starts them at 0.990, training takes them further apart, and averaging
changes the model measurably (README, tiny-attention).

Bounds of the options: the paper uses M ∈ {1, 4} heads of size D ∈ {1, 4}. Up to MAX_HEADS = 64
heads of up to MAX_HEAD_DIM = 64 each (an ordinary attention head's size: beyond it the adapter is
no longer tiny) are allowed. The perturbation of copied heads is a fraction of each matrix's std,
at most 1: noise as large as the weights leaves nothing of the copied head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from peftviz.errors import ConfigError
from peftviz.files import FileProblem, check_regular
from peftviz.methods.base import MethodConfig, PeftMethod, StartFrom, Variant
from peftviz.methods.registration import registered
from peftviz.modeling.backbones import encoder_layers
from peftviz.options import option

MAX_HEADS = 64
MAX_HEAD_DIM = 64
# the heads' starting noise: a fixed generator, not the training seed (seeds differ through the
# one-head run the heads are copied from); fixed so a page can rebuild a run's starting heads
NOISE_SEED = 0
# the largest init_from file read: 64 one-head adapters of head size 64 on a 4096-wide, 48-layer encoder is 200 MB
INIT_FROM_LIMIT = 1 << 30


@dataclass
class TinyAttentionConfig(MethodConfig):
    n_heads: int = option(
        1, "M, attention heads per adapter (paper: 1, or 4 with parameter averaging)", at_least=1, at_most=MAX_HEADS
    )
    head_dim: int = option(1, "D, the size of each head (paper: 1)", at_least=1, at_most=MAX_HEAD_DIM)
    placement: Literal["sequential", "parallel"] = option(
        "sequential", "sequential: between attention block and FFN; parallel: beside the attention block"
    )
    init_from: str | None = option(None, "safetensors file of a trained one-head adapter to start every head from")
    init_perturbation: float = option(
        0.1,
        "p, noise added to each copied head as a fraction of its matrix's std; heads start at cosine ≈ 1/(1+p²)",
        at_least=0,
        at_most=1,
    )
    average_heads: bool = option(False, "after training, average the heads (eqs. 5–8) and evaluate again")


def _read_adapter(path: str) -> dict:
    """The tensors of `init_from`: a regular file (no FIFO, device or link) of a bounded size, then read by the
    safetensors library, which checks its header against the file's bytes. A bad file is one ConfigError line."""
    try:
        check_regular(Path(path), INIT_FROM_LIMIT, follow_symlinks=False)
        return load_file(path)
    except FileProblem as problem:
        raise ConfigError(f"init_from {path}: the file {problem}") from None
    except (SafetensorError, OSError) as err:
        raise ConfigError(f"init_from {path}: the file is not a safetensors file ({str(err)[:80]})") from None


class TinyAttention(nn.Module):
    """One layer's adapter: z (B, T, H), key bias (B, 1, 1, T) or None -> z̃ (B, T, H).

    query/key/value.weight are (M·D, H): rows m·D … m·D + D − 1 belong to head m.
    out.weight is (H, M·D): columns of head m are O^(m). No biases, as in eqs. 1–4.
    """

    def __init__(self, hidden_size: int, n_heads: int = 1, head_dim: int = 1):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim
        inner = n_heads * head_dim
        self.query = nn.Linear(hidden_size, inner, bias=False)
        self.key = nn.Linear(hidden_size, inner, bias=False)
        self.value = nn.Linear(hidden_size, inner, bias=False)
        self.out = nn.Linear(inner, hidden_size, bias=False)
        self.reset_output()

    def reset_output(self) -> None:
        bound = 0.01 / math.sqrt(self.head_dim)
        nn.init.uniform_(self.out.weight, -bound, bound)

    def forward(self, z: Tensor, key_bias: Tensor | None = None) -> Tensor:
        B, T, _ = z.shape
        M, D = self.n_heads, self.head_dim
        q, k, v = (
            proj(z).view(B, T, M, D).transpose(1, 2) for proj in (self.query, self.key, self.value)
        )  # (B, M, T, D)
        if key_bias is not None:
            key_bias = key_bias.to(q.dtype)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=key_bias)  # (B, M, T, D), scale 1/√D
        return self.out(heads.transpose(1, 2).reshape(B, T, M * D))  # (B, T, H)

    def per_head(self) -> dict[str, Tensor]:
        """Each head's matrices: W_Q, W_K, W_V as (M, D, H) and O as (M, H, D)."""
        M, D = self.n_heads, self.head_dim
        hidden = self.out.out_features
        split = {name: getattr(self, name).weight.detach().view(M, D, hidden) for name in ("query", "key", "value")}
        split["out"] = self.out.weight.detach().view(hidden, M, D).permute(1, 0, 2)
        return split

    @torch.no_grad()
    def averaged(self) -> TinyAttention:
        """Eqs. 5–8: one head with the heads' mean W_Q, W_K, W_V and output projection M·Ō."""
        heads = self.per_head()
        single = TinyAttention(self.out.out_features, 1, self.head_dim).to(self.out.weight)
        for name in ("query", "key", "value"):
            getattr(single, name).weight.copy_(heads[name].mean(0))  # (D, H)
        single.out.weight.copy_(heads["out"].sum(0))  # (H, D) = M · Ō
        return single

    @torch.no_grad()
    def copy_heads_from(self, single: dict[str, Tensor], perturbation: float, generator: torch.Generator) -> None:
        """Start every head as a perturbed copy of a trained one-head adapter's weights.

        Each O^(m) is O / M, so with no perturbation the M-head adapter equals the one-head one. The
        noise is `perturbation` times the std of the copy it is added to (O / M for the output).
        """
        M = self.n_heads
        for name in ("query", "key", "value", "out"):
            weight = single[f"{name}.weight"]  # (D, H), out (H, D)
            copies = weight.repeat(1, M) / M if name == "out" else weight.repeat(M, 1)  # (M·D, H), out (H, M·D)
            noise = torch.randn(copies.shape, generator=generator) * perturbation * copies.std()
            getattr(self, name).weight.copy_(copies + noise.to(copies))


def copy_heads_into(adapters, state: dict[str, Tensor], perturbation: float) -> None:
    """Start each layer's adapter in `adapters` as perturbed copies of a one-head adapter's state.

    `state`: keys [method.]adapters.<l>.{query,key,value,out}.weight; one generator seeded
    NOISE_SEED draws the noise of every layer in turn, so the same call gives the same starting
    heads (and a page can rebuild them: `starting_heads`).
    """
    state = {key.removeprefix("method."): value for key, value in state.items()}
    generator = torch.Generator().manual_seed(NOISE_SEED)
    for index, adapter in enumerate(adapters):
        prefix = f"adapters.{index}."
        single = {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
        if single.get("query.weight") is None or single["query.weight"].shape[0] != adapter.head_dim:
            raise ValueError(f"init_from holds no one-head adapter of head size {adapter.head_dim} for layer {index}")
        adapter.copy_heads_from(single, perturbation, generator)


def starting_heads(
    init_from: str, n_layers: int, hidden_size: int, n_heads: int, head_dim: int, perturbation: float
) -> list[TinyAttention]:
    """The adapters a run with `init_from` started training from, rebuilt (the same noise)."""
    adapters = [TinyAttention(hidden_size, n_heads, head_dim) for _ in range(n_layers)]
    copy_heads_into(adapters, _read_adapter(init_from), perturbation)
    return adapters


@registered
class TinyAttentionMethod(PeftMethod):
    """input_ids (B, T) -> hidden (B, T, D); one TinyAttention adapter per layer.

    Parameters: 4·H·M·D per layer (W_Q, W_K, W_V, O). The adapters are built after the encoder's
    from_pretrained, so their tiny output initialisation is never overwritten by it (the official
    code lost it that way).
    """

    config_class = TinyAttentionConfig
    # its Table 4 trains around 8e-4 … 1e-3; the short presets need more to move in three epochs
    learning_rates = {"smoke": 1e-2, "quick": 5e-3, "quick-long": 5e-3, "paper": 1e-3, "paper-long": 1e-3}
    # the paper's recipe: one head, then four heads started as perturbed copies of it and averaged at the end. The
    # perturbation is written into the config, so the run records the noise its heads started from (its
    # default was 0.01 before 0.1)
    variants = (
        Variant("1H"),
        Variant(
            "4H averaged",
            {"n_heads": 4, "average_heads": True},
            defaults={"init_perturbation": TinyAttentionConfig().init_perturbation},
            starts_from="1H",
        ),
    )
    # every head copies a complete one-head adapter of the same model and head size
    starts_from = StartFrom("init_from", requires={"n_heads": 1}, same_settings=("model",), same_options=("head_dim",))
    averages_heads = True
    attention_note = "The tiny-attention adapter's own weights are not recorded: below, the encoder's attention."

    def __init__(self, config: TinyAttentionConfig, encoder_config):
        super().__init__(config, encoder_config)
        self.adapters = nn.ModuleList(
            TinyAttention(self.hidden_size, config.n_heads, config.head_dim) for _ in range(self.n_layers)
        )
        self.averaged_from: int | None = None
        if config.init_from:
            copy_heads_into(self.adapters, _read_adapter(config.init_from), config.init_perturbation)

    def attach(self, encoder) -> None:
        for index, layer in enumerate(encoder_layers(encoder)):
            self._hooks.append(layer.attention.register_forward_hook(self._adapter_hook(index), with_kwargs=True))

    def _adapter_hook(self, index: int):
        def hook(module, args, kwargs, output):
            attention_out, weights = output  # (B, T, H)
            block_input = args[0] if args else kwargs["hidden_states"]
            key_bias = args[1] if len(args) > 1 else kwargs.get("attention_mask")
            source = attention_out if self.config.placement == "sequential" else block_input
            return attention_out + self.adapters[index](source, key_bias), weights

        return hook

    def average_heads_(self) -> TinyAttentionMethod:
        """Replace every adapter by its parameter average (eqs. 5–8), in place; returns self."""
        self.averaged_from = self.config.n_heads
        self.adapters = nn.ModuleList(adapter.averaged() for adapter in self.adapters)
        self.config = replace(self.config, n_heads=1)
        return self

    def after_training(self) -> str | None:
        if not self.config.average_heads or self.config.n_heads == 1:
            return None
        self.average_heads_()
        return "averaged"
