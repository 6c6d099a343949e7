"""Longformer backbones: every method on sliding-window + global attention, never an L × L matrix.

transformers' `LongformerSelfAttention` takes no per-forward state and has no prefix keys, so
peftviz runs Longformer checkpoints through its own modules. They have the same parameter names
as `LongformerModel` (a Longformer folder or hub checkpoint loads unchanged) and compute the
same attention (a test checks it against transformers'), with room for the methods:

    positions   [P_1 … P_j | <s> text …]
    global      the first g = j + 1 positions: the prefix positions (prefix-propagation) and <s>

- A global query attends to every position, with the global projections (query_global,
  key_global, value_global); every position attends to the global keys.
- Every other query attends, with the local projections, to the global keys and to the positions
  at most s = window / 2 away (Longformer's sliding window).
- Prefix-tuning's keys/values are extra keys in front of both, so every query attends to them.
- Each query's first `ctx.n_prefix_keys` keys are its prefix keys (prefix-tuning's extra keys, or the
  prefix positions), so the kernel split of eq. 3 and λ(C) work as on BERT (see attention.attend).

The local part runs over the text positions in blocks of s queries: the queries of block b can
only see positions in blocks b − 1, b, b + 1, so each block attends over [extra keys | global
keys | 3s neighbours] under a band mask. (Prefix positions are global: never in a window.) Scores are (B·L/s, H, s, e + g + 3s) instead of (B, H, L, L); recorded
weights are kept in the same banded form (`BandedAttention`).

Unlike transformers' Longformer, the sequence is not padded to a multiple of the window before
the layers: only the local attention's queries, keys and values are zero-padded to a multiple of
s, inside the attention. The projections and feed-forward blocks run on exactly j + T positions,
so prefix-propagation's j positions do not turn into a whole extra window of padding.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import LongformerConfig
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.longformer.modeling_longformer import (
    LongformerEmbeddings,
    LongformerIntermediate,
    LongformerOutput,
    LongformerPreTrainedModel,
    LongformerSelfOutput,
)

from peftviz.modeling.attention_function import AttentionContext, attend, fusable, key_padding_bias

LocalAttention = Literal["blocks", "flex"]


@dataclass
class BandedAttention:
    """One layer's recorded Longformer attention, in the banded form it is computed in.

    Keys, as every query sees them: [e extra keys | the L positions]. Shapes:
    front: (B, H, L, e + g) weights of the non-global queries on the extra keys and global positions
    band: (B, H, L, 2s + 1) weights of the non-global queries on positions i − s … i + s
    global_rows: (B, H, g, e + L) full rows of the g global queries
    Rows of global queries in `front` and `band` are zeros. Memory is O(L · (e + g + s)).
    """

    front: Tensor
    band: Tensor
    global_rows: Tensor
    n_extra: int
    n_global: int

    @property
    def length(self) -> int:
        return self.band.shape[2]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The (B, H, Tq, Tk) of the dense weights this stands for."""
        B, H, L, _ = self.band.shape
        return (B, H, L, self.n_extra + L)

    def key_mass(self, n_keys: int) -> Tensor:
        """(B, H, L): each query's weight on its first n_keys keys (n_keys ≤ e + g: extra and global)."""
        g = self.n_global
        local = self.front[..., :n_keys].sum(-1)  # (B, H, L)
        return torch.cat([self.global_rows[..., :n_keys].sum(-1), local[:, :, g:]], dim=2)

    def row_sums(self) -> Tensor:
        """(B, H, L): each query's total weight (1 for softmax rows, 1 + α for the kernel form)."""
        g = self.n_global
        local = self.front.sum(-1) + self.band.sum(-1)
        return torch.cat([self.global_rows.sum(-1), local[:, :, g:]], dim=2)

    def rows(self, start: int, stop: int) -> Tensor:
        """(B, H, stop − start, e + L): the dense rows of queries start … stop − 1."""
        B, H, L, width = self.band.shape
        e, g, s = self.n_extra, self.n_global, (width - 1) // 2
        n = stop - start
        # column of position p is e + s + p, so band keys left of position 0 land in columns >= e
        dense = self.band.new_zeros(B, H, n, e + s + L + s)
        dense[..., :e] = self.front[:, :, start:stop, :e]
        dense[..., e + s : e + s + g] = self.front[:, :, start:stop, e:]
        cols = e + torch.arange(start, stop, device=dense.device)[:, None] + torch.arange(width, device=dense.device)
        dense.scatter_add_(-1, cols.expand(B, H, n, width), self.band[:, :, start:stop])  # position i − s + r
        dense = torch.cat([dense[..., :e], dense[..., e + s : e + s + L]], dim=-1)  # (B, H, n, e + L)
        n_global_rows = max(0, min(stop, g) - start)
        if n_global_rows:
            dense[:, :, :n_global_rows] = self.global_rows[:, :, start : start + n_global_rows]
        return dense

    def to_dense(self) -> Tensor:
        """(B, H, L, e + L): for tests and short inputs only."""
        return self.rows(0, self.length)

    def trimmed(self, length: int) -> BandedAttention:
        """The first `length` queries and keys (drops the padding to the window multiple)."""
        return BandedAttention(
            self.front[:, :, :length],
            self.band[:, :, :length],
            self.global_rows[..., : self.n_extra + length],
            self.n_extra,
            self.n_global,
        )

    def select(self, index: int) -> BandedAttention:
        """Batch item `index` (kept as a batch of one), as float32 on the CPU."""
        front, band, global_rows = (
            t[index : index + 1].float().cpu() for t in (self.front, self.band, self.global_rows)
        )
        return BandedAttention(front, band, global_rows, self.n_extra, self.n_global)


def key_mass(weights: Tensor | BandedAttention, n_keys: int) -> Tensor:
    """(B, H, Tq): each query's weight on its first n_keys keys, for dense or banded records."""
    if isinstance(weights, BandedAttention):
        return weights.key_mass(n_keys)
    return weights[..., :n_keys].sum(-1)


def row_sums(weights: Tensor | BandedAttention) -> Tensor:
    """(B, H, Tq): each query's total weight, for dense or banded records."""
    return weights.row_sums() if isinstance(weights, BandedAttention) else weights.sum(-1)


def query_rows(weights: Tensor | BandedAttention, start: int, stop: int) -> Tensor:
    """(B, H, stop − start, Tk): dense rows of some queries, for dense or banded records."""
    return weights.rows(start, stop) if isinstance(weights, BandedAttention) else weights[..., start:stop, :]


# ---------------------------------------------------------------------------------------------
# the banded attention


def neighbour_blocks(x: Tensor, size: int) -> Tensor:
    """(B, H, L, d) -> (B, L/size, H, 3·size, d): for block b, positions of blocks b − 1, b, b + 1."""
    padded = F.pad(x, (0, 0, size, size))  # (B, H, L + 2s, d), zeros beyond both ends
    return padded.unfold(2, 3 * size, size).permute(0, 2, 1, 4, 3)  # (B, nb, H, 3s, d)


def band_mask(size: int, device) -> Tensor:
    """(s, 3s) bool: query a of a block sees neighbour key c iff |(c − s) − a| ≤ s."""
    a = torch.arange(size, device=device)[:, None]
    c = torch.arange(3 * size, device=device)[None, :]
    return (c >= a) & (c <= a + 2 * size)


def band_from_blocks(weights: Tensor, size: int) -> Tensor:
    """(B, nb, H, s, 3s) neighbour weights -> (B, H, L, 2s + 1) on offsets −s … s."""
    B, nb, H = weights.shape[:3]
    offsets = torch.arange(size, device=weights.device)[:, None] + torch.arange(2 * size + 1, device=weights.device)
    band = weights.gather(-1, offsets.expand(B, nb, H, size, 2 * size + 1))  # (B, nb, H, s, 2s + 1)
    return band.transpose(1, 2).reshape(B, H, nb * size, 2 * size + 1)


@dataclass
class LongLayout:
    """What every layer of one forward needs to know about its L = j + T positions."""

    n_prefix_queries: int  # j: prefix positions in front of the text (prefix-propagation), all global
    key_visible: Tensor  # (B, L) bool, False at padding
    _biases: dict = field(default_factory=dict)  # the attention biases, shared by all layers

    @property
    def n_global(self) -> int:
        """g: the prefix positions and the text's first token."""
        return self.n_prefix_queries + 1

    def global_bias(self, n_extra: int, dtype: torch.dtype) -> Tensor:
        """(B, 1, 1, e + L) additive bias of the global queries' keys; built once per forward."""
        key = ("global", n_extra, dtype)
        if key not in self._biases:
            self._biases[key] = key_padding_bias(self.key_visible, n_extra, dtype)
        return self._biases[key]

    def local_bias(self, size: int, n_front: int, dtype: torch.dtype) -> Tensor:
        """(B·nb, 1, s, n_front + 3s) additive bias of the text blocks' keys [front keys | neighbours].

        The blocks cover the T text positions (nb = ⌈T / s⌉; positions past T, the attention's
        own padding, are invisible). Front keys (extra and global) are always visible; a
        neighbour is visible inside the band when it is neither padding nor global (global keys
        are already among the front keys). Computed once per forward for all layers alike.
        """
        key = (size, n_front, dtype)
        if key not in self._biases:
            text = self.key_visible[:, self.n_prefix_queries :]
            local = F.pad(text, (0, -text.shape[1] % size), value=False)
            local[:, 0] = False  # <s> is global
            B, T = local.shape
            neighbours = F.pad(local, (size, size), value=False).unfold(1, 3 * size, size)  # (B, nb, 3s)
            visible = band_mask(size, local.device) & neighbours[:, :, None, :]  # (B, nb, s, 3s)
            bias = torch.zeros(B, T // size, size, n_front + 3 * size, dtype=dtype, device=local.device)
            bias[..., n_front:].masked_fill_(~visible, torch.finfo(dtype).min)
            self._biases[key] = bias.view(B * (T // size), 1, size, n_front + 3 * size)
        return self._biases[key]

    def flex_mask(self, n_text: int, n_extra: int, size: int, copies: int, device):
        """`band_block_mask` of this forward's shape. The encoder asks for it before its layers run (eagerly:
        inside a compiled layer dynamo would trace the mask's building into the graph, not use the cache)."""
        key = ("flex mask", n_text, n_extra, size, copies)
        if key not in self._biases:
            self._biases[key] = band_block_mask(n_text, n_extra, self.n_prefix_queries, size, copies, str(device))
        return self._biases[key]

    def flex_visible(self, n_extra: int) -> Tensor:
        """(B, e + L) bool: the keys FlexAttention may see, [e extra keys (always) | the L positions (not padding)]."""
        key = ("flex", n_extra)
        if key not in self._biases:
            self._biases[key] = F.pad(self.key_visible, (n_extra, 0), value=True)
        return self._biases[key]


# ---------------------------------------------------------------------------------------------
# the local attention as one FlexAttention call


def dropout_keep(seed: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor, threshold: Tensor) -> Tensor:
    """Whether attention dropout keeps the weight of query q on key k in batch row b, head h: a counter-based hash.

    A fused kernel cannot read a (B, H, T, e + L) mask from memory at 4096 tokens (gigabytes a layer), so the
    kernel computes each bit from its indices and a per-call seed, as fused dropout kernels do with Philox: the
    indices are mixed in 64-bit integers (no overflow on any backend), folded to 31 bits and run through two
    rounds of a 32-bit integer finaliser (constant 0x45D9F3B); the low 24 bits are uniform, and the weight is
    kept when they are at least `threshold` = round(p · 2²⁴). The same bits on a GPU kernel, the CPU and in
    the tests' dense reference: any index tensors broadcast."""
    x = seed ^ (b.long() * 0x27D4EB2F) ^ (h.long() * 0x165667B1) ^ (q.long() * 0x61C88647) ^ (k.long() * 0x7FEB352D)
    x = (x ^ (x >> 31)) & 0x7FFFFFFF
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0x7FFFFFFF
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0x7FFFFFFF
    return ((x ^ (x >> 16)) & 0xFFFFFF) >= threshold


def dropout_seed(device) -> Tensor:
    """One call's seed of `dropout_keep`, from torch's generator: a seeded run draws the same masks again."""
    return torch.randint(0, 2**31 - 1, (), device=device)


def dropout_threshold(p: float) -> int:
    """round(p · 2²⁴): the 24-bit threshold of `dropout_keep`; the dropout rate is exactly threshold / 2²⁴."""
    if not 0 <= p <= 1:  # (NaN too) torch's dropout refuses the same
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return round(p * 2**24)


@functools.lru_cache(maxsize=64)
def band_block_mask(n_text: int, n_extra: int, n_prefix: int, size: int, copies: int, device: str):
    """The BlockMask of the text queries over `copies` copies of [e extra keys | the L = j + T positions].

    Text query t sees every extra key and every global position (the j prefix positions and <s>), and the
    positions whose text index u has |t − u| ≤ s: the blocks' band. Padding is not in it (the score mod
    masks it), so one mask serves every batch of this shape and is built once, for the whole run: with
    B = H = None it is a (T/128, copies · N/128) grid of tiles, built eagerly (compiling it would compile again
    for every new length). The key count is a tensor, not a constant, so a compiled kernel that reads this
    mask's mask_mod for partial tiles is not specialised to one length."""
    from torch.nn.attention.flex_attention import create_block_mask

    n_keys = n_extra + n_prefix + n_text
    keys = torch.tensor(n_keys, device=device)  # (a tensor: see above)
    front = n_extra + n_prefix + 1  # e + g

    def band_and_front(b, h, q_idx, kv_idx):
        key = kv_idx % keys  # the same key in every copy
        return (key < front) | ((q_idx - (key - n_extra - n_prefix)).abs() <= size)

    return create_block_mask(band_and_front, None, None, n_text, copies * n_keys, device)


@functools.cache
def _flex_attention(device_type: str, grad: bool):
    """FlexAttention as it runs on this device, or None where it cannot: compiled on a GPU (its fused kernel,
    forward and backward); eager on the CPU, where it is torch's reference math and has no backward.

    One kernel for every length of a sweep (`compiled_flex`)."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type == "cuda":
        return compiled_flex()
    return None if grad else flex_attention


def compiled_flex(backend: str = "inductor"):
    """FlexAttention compiled with dynamic shapes: one kernel for every length of a sweep. With static shapes
    each new length compiled a kernel of its own until torch's recompile limit (8), after which it ran the
    reference math: 1.7-2.8× slower (the H100 run of 2026-11-26)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True, backend=backend)


def flex_kernel(device_type: str, grad: bool):
    """`_flex_attention`, or inside a compiled layer FlexAttention itself (dynamo compiles it with the layer;
    it would trace through the cache of `_flex_attention` anyway) on a GPU, and on a CPU None: the blocks.
    (Inductor's CPU template for FlexAttention generated C++ that did not build, with dynamic shapes, torch
    2.13; a compiled CPU run would fail at its first evaluation.)"""
    if torch.compiler.is_compiling():
        from torch.nn.attention.flex_attention import flex_attention

        return flex_attention if device_type == "cuda" else None
    return _flex_attention(device_type, grad)


def flex_local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    extra_k: Tensor,
    extra_v: Tensor,
    layout: LongLayout,
    size: int,
    scaling: float,
    dropout: float = 0.0,
    split: tuple[int, Tensor | float] | None = None,
) -> Tensor:
    """The text queries' local attention as one FlexAttention call over [extra keys | all L positions].

    q (B, H, T, d); k, v (B, H, L, d) local projections; extra_k, extra_v (B, H, e, d) -> (B, H, T, d).
    The same attention as the blocks (`LongSelfAttention._block_attention`), with no block copies: the block
    mask skips the 128 × 128 tiles outside the band, and the score mod masks padding.

    split = (n, α): the kernel form with exp kernels (eq. 3), softmax over the keys after the first n plus
    α · softmax over those n prefix keys: the FlexAttention call leaves the first n out, and the prefix term
    is one fused attention over n keys that every query sees (as `fused_exp_kernel_attention` on the blocks).

    Attention dropout as the blocks' (torch's): out = Σ_k m_k p_k v_k / (1 − p), with p_k the softmax over
    all visible keys and m_k ~ Bernoulli(1 − p). A score mod cannot zero a weight after the softmax, only
    remove a key before it (which would renormalise over the kept keys), so the keys are doubled:
    [K | K] with values [V | 0], copy one keeps key k where m_k = 1 and copy two where m_k = 0. Each key is
    in the normaliser once, and only kept keys carry their values: exactly dropout's output, and its
    gradient, for twice the band's scores."""
    T, e = q.shape[2], extra_k.shape[2]
    keys = torch.cat([extra_k, k], dim=2).to(q.dtype)  # (B, H, N = e + L, d)
    values = torch.cat([extra_v, v], dim=2).to(q.dtype)
    n_keys = keys.shape[2]
    visible = layout.flex_visible(e)  # (B, N)
    copies = 2 if dropout else 1
    mask = layout.flex_mask(T, e, size, copies, q.device)
    first = split[0] if split else 0  # the sequence term's first key (kernel form: after the prefix keys)
    if dropout:
        keys = torch.cat([keys, keys], dim=2)  # (B, H, 2N, d)
        values = torch.cat([values, torch.zeros_like(values)], dim=2)
        seed = dropout_seed(q.device)
        threshold = torch.tensor(dropout_threshold(dropout), device=q.device)
        n = torch.tensor(n_keys, device=q.device)

        def score_mod(score, b, h, q_idx, kv_idx):
            key = kv_idx % n
            kept = dropout_keep(seed, b, h, q_idx, key, threshold)
            return torch.where(visible[b, key] & (key >= first) & (kept != (kv_idx >= n)), score, -float("inf"))
    else:

        def score_mod(score, b, h, q_idx, kv_idx):
            return torch.where(visible[b, kv_idx] & (kv_idx >= first), score, -float("inf"))

    attention = flex_kernel(q.device.type, torch.is_grad_enabled())
    out = attention(q, keys, values, score_mod=score_mod, block_mask=mask, scale=scaling)  # (B, H, T, d)
    if dropout:
        kept = 1 - dropout_threshold(dropout) / 2**24
        out = out / kept if kept else torch.zeros_like(out)  # p = 1 drops every weight, as torch's dropout
    if split:
        prefix_k, prefix_v = keys[:, :, :first], values[:, :, :first]  # (B, H, n, d), never padding
        prefix = F.scaled_dot_product_attention(q, prefix_k, prefix_v, dropout_p=dropout, scale=scaling)
        out = out + split[1] * prefix
    return out


def set_local_attention(module: nn.Module, path: LocalAttention) -> int:
    """How every Longformer layer in `module` runs its text queries' attention: "blocks" (the default: banded
    blocks, every feature) or "flex" (one FlexAttention call, attention dropout and eq. 3's kernel split with exp
    kernels included, wherever nothing needs the blocks: recorded weights, other kernels or α = λ(C), and on the
    CPU gradients, which torch's FlexAttention does not have there). Returns how many layers it set."""
    if path not in get_args(LocalAttention):
        raise ValueError(f"local attention must be one of {', '.join(get_args(LocalAttention))}, not {path!r}")
    layers = [layer for layer in module.modules() if isinstance(layer, LongSelfAttention)]
    for layer in layers:
        layer.local_attention = path
    return len(layers)


def in_autocast_dtype(x: Tensor) -> Tensor:
    """x in autocast's lower precision where autocast is on, else x itself.

    Autocast casts a float32 input in every linear layer that reads it, and casts activations are not cached
    (only weights are): a layer's six projections of one hidden state would make six copies of it. With one
    cast the forward is the same to the bit; the backward sums the projections' input gradients in that
    precision before one cast back (autocast's casts summed them in float32), which moves the gradients
    below hidden by bf16 rounding."""
    device = x.device.type
    return x.to(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else x


class LongSelfAttention(nn.Module):
    """Longformer self-attention with prefix keys, the kernel split, and banded recording.

    hidden (B, L, D) -> (B, L, D), any L. Parameters as transformers'
    LongformerSelfAttention: local query/key/value and global query_global/key_global/value_global.
    """

    def __init__(self, config: LongformerConfig, layer_id: int):
        super().__init__()
        D = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = D // self.num_heads
        for name in ("query", "key", "value", "query_global", "key_global", "value_global"):
            setattr(self, name, nn.Linear(D, D))
        self.dropout = config.attention_probs_dropout_prob
        self.layer_id = layer_id
        self.one_sided_attn_window_size = config.attention_window[layer_id] // 2
        self.local_attention: LocalAttention = "blocks"  # `set_local_attention`

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d)

    def forward(self, hidden: Tensor, layout: LongLayout, ctx: AttentionContext) -> Tensor:
        B, L, D = hidden.shape
        s, g, layer = self.one_sided_attn_window_size, layout.n_global, self.layer_id
        scaling = self.head_dim**-0.5
        dropout = self.dropout if self.training else 0.0
        x = in_autocast_dtype(hidden)  # (B, L, D), cast once for the six projections instead of once by each

        # global queries: every position, with the global projections
        q_glob = self._heads(self.query_global(x[:, :g]))  # (B, H, g, d)
        extra_k, extra_v = self._extra_keys(ctx, q_glob)  # (B, H, e, d)
        e = extra_k.shape[2]
        k_glob = torch.cat([extra_k, self._heads(self.key_global(x))], dim=2)  # (B, H, e + L, d)
        v_glob = torch.cat([extra_v, self._heads(self.value_global(x))], dim=2)
        bias = layout.global_bias(e, q_glob.dtype)  # (B, 1, 1, e + L)
        out_glob, w_glob = attend(
            q_glob, k_glob, v_glob, bias, scaling, ctx.n_prefix_keys, ctx.kernel, layer, dropout, ctx.record
        )

        # every text query: the front keys and its window (prefix positions are global, never in a window)
        j, T = layout.n_prefix_queries, L - layout.n_prefix_queries
        k, v = (self._heads(proj(x)) for proj in (self.key, self.value))  # (B, H, L, d)
        q = self._heads(self.query(x[:, j:]))  # (B, H, T, d)
        if self._runs_flex(ctx, hidden.device):
            split = (ctx.n_prefix_keys, ctx.kernel.alpha[layer]) if ctx.kernel else None
            out_local = flex_local_attention(q, k, v, extra_k, extra_v, layout, s, scaling, dropout, split)
            w_local = None
        else:
            out_local, w_local = self._block_attention(q, k, v, extra_k, extra_v, layout, ctx, s, scaling, dropout)

        out = torch.cat([out_glob, out_local[:, :, 1:T]], dim=2)  # (B, H, L, d): global rows, then text after <s>
        if ctx.record:
            ctx.attentions[layer] = self._banded(w_local.detach(), w_glob.detach(), B, e, j, s).trimmed(L)
        return out.transpose(1, 2).reshape(B, L, D)

    def prepare_flex(self, layout: LongLayout, ctx: AttentionContext, n_text: int, device) -> None:
        """Build this layer's FlexAttention mask for the forward about to run, if it runs on flex."""
        if self.local_attention == "flex":
            e = 0 if ctx.prefix_kv is None else ctx.prefix_kv[self.layer_id][0].shape[2]
            copies = 2 if self.training and self.dropout else 1  # (dropout doubles the keys)
            layout.flex_mask(n_text, e, self.one_sided_attn_window_size, copies, device)

    def _extra_keys(self, ctx: AttentionContext, like: Tensor) -> tuple[Tensor, Tensor]:
        """This layer's extra keys and values (B, H, e, d): prefix-tuning's, or none; in `like`'s dtype, the
        projections' (a float32 key concatenated with bf16 ones would promote them all to float32, for the
        attention to cast them back)."""
        if ctx.prefix_kv is None:
            none = like.new_zeros(like.shape[0], self.num_heads, 0, self.head_dim)
            return none, none
        prefix_k, prefix_v = ctx.prefix_kv[self.layer_id]
        return prefix_k.to(like.dtype), prefix_v.to(like.dtype)

    def _runs_flex(self, ctx: AttentionContext, device: torch.device) -> bool:
        """Whether the local attention runs as one FlexAttention call: chosen, and nothing asks for what only the
        blocks give: recorded weights, a kernel split other than eq. 3's exp kernels with a fixed α, and on the
        CPU gradients."""
        split_fuses = ctx.kernel is None or fusable(ctx.kernel)
        chosen = self.local_attention == "flex" and not ctx.record and split_fuses
        return chosen and flex_kernel(device.type, torch.is_grad_enabled()) is not None

    def _block_attention(self, q, k, v, extra_k, extra_v, layout, ctx, s, scaling, dropout):
        """The text queries in blocks of s over [extra keys | global keys | 3s neighbours] under a band mask.

        q (B, H, T, d); k, v (B, H, L, d); extra (B, H, e, d) -> (B, H, T, d) and the weights (or None)."""
        B, H, T, d = q.shape
        j, g, e = layout.n_prefix_queries, layout.n_global, extra_k.shape[2]
        front_k = torch.cat([extra_k, k[:, :, :g]], dim=2)  # (B, H, e + g, d)
        front_v = torch.cat([extra_v, v[:, :, :g]], dim=2)
        padded = math.ceil(T / s) * s
        q, k, v = (F.pad(t, (0, 0, 0, padded - T)) for t in (q, k[:, :, j:], v[:, :, j:]))  # (B, H, padded, d)
        nb = padded // s

        def block_keys(front: Tensor, seq: Tensor) -> Tensor:  # -> (B·nb, H, e + g + 3s, d)
            front = front[:, None].expand(B, nb, -1, -1, -1)
            return torch.cat([front, neighbour_blocks(seq, s)], dim=3).flatten(0, 1)

        q_blocks = q.view(B, H, nb, s, d).transpose(1, 2).flatten(0, 1)  # (B·nb, H, s, d)
        block_bias = layout.local_bias(s, e + g, q.dtype)
        out, weights = attend(
            q_blocks,
            block_keys(front_k, k),
            block_keys(front_v, v),
            block_bias,
            scaling,
            ctx.n_prefix_keys,
            ctx.kernel,
            self.layer_id,
            dropout,
            ctx.record,
        )
        return out.view(B, nb, H, s, d).transpose(1, 2).flatten(2, 3)[:, :, :T], weights

    def _banded(self, w_local: Tensor, w_glob: Tensor, B: int, e: int, j: int, s: int) -> BandedAttention:
        """Text blocks' weights (B·nb, H, s, e + g + 3s) and global rows -> one BandedAttention."""
        H, g = self.num_heads, j + 1
        w_local = w_local.view(B, -1, H, s, w_local.shape[-1])  # (B, nb, H, s, e + g + 3s)
        front = w_local[..., : e + g].transpose(1, 2).flatten(2, 3)  # (B, H, T', e + g), text queries
        band = band_from_blocks(w_local[..., e + g :], s)  # (B, H, T', 2s + 1)
        front, band = (F.pad(t, (0, 0, j, 0)) for t in (front, band))  # prefix positions' rows in front
        front[:, :, :g] = 0  # the global queries' rows are `global_rows`
        band[:, :, :g] = 0
        return BandedAttention(front, band, w_glob, e, g)


class LongAttention(nn.Module):
    """Self-attention + output sublayer: hidden (B, L, D) -> ((B, L, D), None).

    `attention_mask` (B, 1, 1, L), the additive padding bias, is not used here: it is passed so
    that adapters hooked on this module (tiny-attention) see it, as on BERT.
    """

    def __init__(self, config: LongformerConfig, layer_id: int):
        super().__init__()
        self.self = LongSelfAttention(config, layer_id)
        self.output = LongformerSelfOutput(config)

    def forward(
        self, hidden_states: Tensor, attention_mask: Tensor | None, layout: LongLayout, peftviz: AttentionContext
    ):
        return self.output(self.self(hidden_states, layout, peftviz), hidden_states), None


class LongLayer(GradientCheckpointingLayer):
    """One Longformer layer: attention, then the feed-forward block. (B, L, D) -> (B, L, D).

    A GradientCheckpointingLayer: with checkpointing enabled its forward is recomputed in the backward."""

    def __init__(self, config: LongformerConfig, layer_id: int):
        super().__init__()
        self.attention = LongAttention(config, layer_id)
        self.intermediate = LongformerIntermediate(config)
        self.output = LongformerOutput(config)

    def forward(
        self, hidden_states: Tensor, attention_mask: Tensor | None, layout: LongLayout, peftviz: AttentionContext
    ):
        attended, _ = self.attention(hidden_states, attention_mask, layout=layout, peftviz=peftviz)
        return self.output(self.intermediate(attended), attended)


class LongLayers(nn.Module):
    def __init__(self, config: LongformerConfig):
        super().__init__()
        self.layer = nn.ModuleList(LongLayer(config, i) for i in range(config.num_hidden_layers))


class LongEncoder(LongformerPreTrainedModel):
    """A Longformer encoder run by peftviz; loads any Longformer checkpoint (same parameter names).

    forward(input_ids (B, T), attention_mask (B, T) 0/1, ..., n_prefix_queries j)
        -> last_hidden_state (B, j + T, D). Prefix positions (added by prefix-propagation's hook
    on the first layer) and the text's first token are global.
    """

    def __init__(self, config: LongformerConfig):
        super().__init__(config)
        if isinstance(config.attention_window, int):
            config.attention_window = [config.attention_window] * config.num_hidden_layers
        for window in config.attention_window:
            if window <= 0 or window % 2:
                raise ValueError(f"attention_window must be positive and even, not {window}")
        self.embeddings = LongformerEmbeddings(config)
        self.encoder = LongLayers(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        peftviz: AttentionContext | None = None,
        n_prefix_queries: int = 0,
    ) -> BaseModelOutput:
        ctx = peftviz or AttentionContext()
        j = n_prefix_queries
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)  # (B, T, D)
        key_visible = F.pad(attention_mask.bool(), (j, 0), value=True)  # (B, L = j + T)
        layout = LongLayout(n_prefix_queries=j, key_visible=key_visible)
        bias = None if bool(key_visible.all()) else key_padding_bias(attention_mask, j, hidden.dtype)
        for layer in self.encoder.layer:  # outside the (compiled) layers: their FlexAttention masks
            layer.attention.self.prepare_flex(layout, ctx, input_ids.shape[1], hidden.device)
        for layer in self.encoder.layer:
            hidden = layer(hidden, bias, layout=layout, peftviz=ctx)  # (B, L, D); the hook adds j at layer 0
        return BaseModelOutput(last_hidden_state=hidden)
