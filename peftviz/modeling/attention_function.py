"""The attention function every peftviz encoder runs, registered with transformers as "peftviz".

transformers 5.x BERT/RoBERTa self-attention projects Q, K, V and then calls the function named
by `config._attn_implementation`, passing through any extra keyword arguments given to the
model's forward. peftviz passes one `AttentionContext` per forward as `peftviz=ctx`; with it the
function can

- prepend per-layer prefix keys/values (prefix-tuning, paper eq. 2),
- treat the first `n_prefix_keys` positions as prefixes (prefix-propagation, eq. 1),
- split the softmax into a sequence term and an α-scaled prefix term (kernel form, eq. 3/7),
- record the attention weights over [prefix keys; sequence keys] for analysis.

Without a context (or with nothing to record) it is plain fused scaled-dot-product attention, and
the kernel form with exponential kernels is two fused calls, one per key group: weights are only
materialised when they are recorded or a non-exponential kernel needs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

ATTN_IMPLEMENTATION = "peftviz"
Kernel = Literal["exp", "rbf", "linear", "polynomial"]
KERNELS = get_args(Kernel)


@dataclass
class KernelSpec:
    """The kernel decomposition of eq. 3: H = w · Kern_seq + α · Kern_prefix.

    alpha: (L,) per-layer scale of the prefix term, or "exact" for each query's own λ(C)
    (the softmax mass it puts on the prefix keys), which also sets w = 1 − λ(C) and turns the
    decomposition back into ordinary softmax attention (appendix A, eq. 5).
    """

    alpha: Tensor | str
    prefix_kernel: str = "exp"
    sequence_kernel: str = "exp"


@dataclass
class AttentionContext:
    """Per-forward state read by `peftviz_attention` and by the methods' layer hooks."""

    n_prefix_keys: int = 0  # prefix keys in front of the sequence keys, in every layer
    prefix_kv: list[tuple[Tensor, Tensor]] | None = None  # per layer (B, H, j, d) keys, values
    prefix_states: list[Tensor] | None = None  # per layer (B, j, D), prefix-propagation's P^(l)
    kernel: KernelSpec | None = None
    record: bool = False
    attentions: dict[int, Tensor] = field(default_factory=dict)  # layer -> (B, H, Tq, Tk)


def key_padding_bias(attention_mask: Tensor, n_prefix: int, dtype: torch.dtype) -> Tensor:
    """(B, T) 0/1 padding mask -> (B, 1, 1, n_prefix + T) additive bias; prefix keys always visible."""
    keep = F.pad(attention_mask.bool(), (n_prefix, 0), value=True)  # (B, j + T)
    bias = torch.zeros(keep.shape, dtype=dtype, device=attention_mask.device)
    bias.masked_fill_(~keep, torch.finfo(dtype).min)
    return bias[:, None, None, :]


def _visible(bias: Tensor) -> Tensor:
    # our biases are 0 (visible) or dtype-min (masked); halfway is a safe threshold
    return bias > torch.finfo(bias.dtype).min / 2


def normalized_kernel(query: Tensor, key: Tensor, bias: Tensor | None, scaling: float, kernel: str) -> Tensor:
    """Row-normalised kernel weights k(q_i, k_j) / Σ_j' k(q_i, k_j') (eq. 8).

    query (B, H, Tq, d), key (B, H, Tk, d), bias broadcastable to (B, H, Tq, Tk) -> (B, H, Tq, Tk).
    exp: exp(<q,k> s), i.e. softmax (eq. 9). rbf: exp(-|q-k|² s / 2), Tsai et al.'s RBF, whose
    |q|² factor cancels in the normalisation. linear: <φ(q), φ(k)> with φ = elu + 1, the positive
    feature map of linear attention. polynomial: (<q,k> s + 1)², non-negative by its even power.
    """
    dots = query @ key.transpose(-1, -2)  # (B, H, Tq, Tk)
    if kernel == "exp":
        logits = dots * scaling
    elif kernel == "rbf":
        logits = (dots - 0.5 * key.pow(2).sum(-1)[..., None, :]) * scaling
    elif kernel in ("linear", "polynomial"):
        if kernel == "linear":
            sim = (F.elu(query) + 1) @ (F.elu(key) + 1).transpose(-1, -2)
        else:
            sim = (dots * scaling + 1).pow(2)
        if bias is not None:
            sim = sim * _visible(bias)
        return sim / sim.sum(-1, keepdim=True).clamp_min(1e-12)
    else:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}")
    if bias is not None:
        logits = logits + bias
    return logits.softmax(-1)


def prefix_mass(query: Tensor, key: Tensor, bias: Tensor | None, scaling: float, n_prefix: int) -> Tensor:
    """λ(C), eq. 6: each query's softmax mass on the first n_prefix keys. -> (B, H, Tq, 1)."""
    scores = (query @ key.transpose(-1, -2)) * scaling  # (B, H, Tq, Tk)
    if bias is not None:
        scores = scores + bias
    return (scores[..., :n_prefix].logsumexp(-1, keepdim=True) - scores.logsumexp(-1, keepdim=True)).exp()


def kernel_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    bias: Tensor | None,
    scaling: float,
    n_prefix: int,
    alpha: Tensor | float,
    sequence_weight: Tensor | float = 1.0,
    prefix_kernel: str = "exp",
    sequence_kernel: str = "exp",
) -> tuple[Tensor, Tensor]:
    """Eq. 3/7: sequence_weight · Kern(Q, K_C, V_C) + α · Kern(Q, K_P, V_P).

    query (B, H, Tq, d); key, value (B, H, Tk, d) whose first n_prefix rows are the prefixes;
    alpha and sequence_weight are floats or broadcast to (B, H, Tq, 1).
    Returns the output (B, H, Tq, d) and the mixing weights (B, H, Tq, Tk) with out = weights @ value.
    """
    key_p, key_c = key[..., :n_prefix, :], key[..., n_prefix:, :]
    bias_p, bias_c = (None, None) if bias is None else (bias[..., :n_prefix], bias[..., n_prefix:])
    w_prefix = normalized_kernel(query, key_p, bias_p, scaling, prefix_kernel)  # (B, H, Tq, j)
    w_seq = normalized_kernel(query, key_c, bias_c, scaling, sequence_kernel)  # (B, H, Tq, T)
    weights = torch.cat([alpha * w_prefix, sequence_weight * w_seq], dim=-1)
    return weights @ value, weights


def fusable(kernel: KernelSpec) -> bool:
    """Eq. 3 with exp kernels and a fixed α runs as two fused attention calls."""
    return not isinstance(kernel.alpha, str) and kernel.prefix_kernel == kernel.sequence_kernel == "exp"


def fused_exp_kernel_attention(
    query: Tensor, key: Tensor, value: Tensor, bias: Tensor | None, scaling: float, n_prefix: int, alpha, dropout: float
) -> Tensor:
    """Eq. 3 with the exp kernel, without materialising weights: -> (B, H, Tq, d).

    Each term of eq. 3 is ordinary softmax attention over its own key group, so each is one
    fused scaled-dot-product call; the result equals `kernel_attention(...)[0]`.
    """

    def attend(keys: slice) -> Tensor:
        mask = None if bias is None else bias[..., keys]
        return F.scaled_dot_product_attention(
            query, key[..., keys, :], value[..., keys, :], attn_mask=mask, dropout_p=dropout, scale=scaling
        )

    return attend(slice(n_prefix, None)) + alpha * attend(slice(0, n_prefix))


def _layer_alpha(kernel: KernelSpec, layer: int, query: Tensor, key: Tensor, bias, scaling, n_prefix):
    """(alpha, sequence_weight) for one layer of the kernel form."""
    if isinstance(kernel.alpha, str):  # "exact": α = λ(C), w = 1 − λ(C)
        lam = prefix_mass(query, key, bias, scaling, n_prefix)
        return lam, 1 - lam
    return kernel.alpha[layer], 1.0


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    bias: Tensor | None,
    scaling: float,
    n_prefix: int,
    kernel: KernelSpec | None,
    layer: int,
    dropout: float,
    record: bool,
) -> tuple[Tensor, Tensor | None]:
    """Attention of queries over keys whose first `n_prefix` are prefix keys, as the method asks.

    query (..., Tq, d), key/value (..., Tk, d), additive bias broadcastable to (..., Tq, Tk).
    Returns the output (..., Tq, d) and, when recorded or needed, the weights (..., Tq, Tk).
    `dropout` is the probability in training mode (0 in eval). Leading dims are free: BERT passes
    (B, H), the Longformer blocks (B·blocks, H).
    """
    if kernel is not None and not record and fusable(kernel):
        out = fused_exp_kernel_attention(query, key, value, bias, scaling, n_prefix, kernel.alpha[layer], dropout)
        return out, None
    if kernel is not None:
        alpha, seq_weight = _layer_alpha(kernel, layer, query, key, bias, scaling, n_prefix)
        _, weights = kernel_attention(
            query, key, value, bias, scaling, n_prefix, alpha, seq_weight, kernel.prefix_kernel, kernel.sequence_kernel
        )
    elif record:
        weights = normalized_kernel(query, key, bias, scaling, "exp")  # (..., Tq, Tk)
    else:  # the fast path: fused attention, no weights materialised
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, dropout_p=dropout, scale=scaling)
        return out, None
    return F.dropout(weights, p=dropout) @ value, weights


def peftviz_attention(
    module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    peftviz: AttentionContext | None = None,
    **kwargs,
) -> tuple[Tensor, Tensor | None]:
    """query (B, H, Tq, d), key/value (B, H, Tk, d), additive mask (B, 1, 1|Tq, Tk) -> (B, Tq, H, d)."""
    ctx = peftviz or AttentionContext()
    layer = module.layer_idx
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    if ctx.prefix_kv is not None:  # prefix-tuning: keys/values only, no queries
        prefix_k, prefix_v = ctx.prefix_kv[layer]  # (B, H, j, d)
        key = torch.cat([prefix_k, key], dim=2)  # (B, H, j + T, d)
        value = torch.cat([prefix_v, value], dim=2)
        if attention_mask is not None:
            attention_mask = F.pad(attention_mask, (prefix_k.shape[2], 0), value=0.0)
    out, weights = attend(
        query, key, value, attention_mask, scaling, ctx.n_prefix_keys, ctx.kernel, layer, dropout, ctx.record
    )
    if ctx.record:
        ctx.attentions[layer] = weights.detach()
    return out.transpose(1, 2).contiguous(), weights  # (B, Tq, H, d)


AttentionInterface.register(ATTN_IMPLEMENTATION, peftviz_attention)
# Without a mask function of the same name transformers would drop 2D padding masks silently.
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)
