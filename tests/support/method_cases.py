"""The table of method cases: every registered method, with options and its parameter count in closed form.

tests/methods/test_method_cases.py drives its checks from METHOD_CASES; a new method adds its rows here.
Each case gives, in terms of the encoder's sizes (L layers, hidden size D, feed-forward width F):
- `method_params`: what `parameter_counts()["method"]` must be (the method's own modules plus
  whatever it injected into the encoder);
- `unfrozen`: pretrained encoder parameters the method makes trainable (BitFit's biases, Houlsby's
  LayerNorms), or ALL for the whole backbone (fine-tuning);
- `frozen`: of the method's parameters, those that do not train (AdaLoRA's rank counts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

FAMILIES = ("bert", "roberta", "longformer")

ALL = "all"  # `unfrozen` of a method that trains the whole backbone


@dataclass(frozen=True)
class Sizes:
    """The sizes of an encoder the closed forms are written in."""

    family: str  # "bert", "roberta" or "longformer"
    L: int  # layers
    D: int  # hidden size
    F: int  # feed-forward width (intermediate size)
    H: int  # attention heads

    @classmethod
    def of(cls, encoder, family: str) -> Sizes:
        c = encoder.config
        return cls(family, c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads)

    @property
    def longformer(self) -> bool:
        return self.family == "longformer"


@dataclass(frozen=True)
class MethodCase:
    id: str
    method: str
    options: dict = field(default_factory=dict)
    method_params: Callable[[Sizes], int] = lambda s: 0
    unfrozen: Callable[[Sizes], int] | str = lambda s: 0
    frozen: Callable[[Sizes], int] = lambda s: 0  # of `method_params`, those that do not train (AdaLoRA's rank counts)
    prefix_keys: int = 0  # keys every query attends to before the text's (recorded attention)
    prefix_queries: int = 0  # positions prepended to the sequence (`n_prefix_queries`)
    families: tuple[str, ...] = FAMILIES  # the encoder families the options apply to

    def __str__(self) -> str:
        return self.id


J, MLP, M, DH = 4, 16, 2, 2  # prefix length, reparameterisation width, tiny-attention heads and head size
R = 4  # LoRA rank
N = 3  # prompt tokens
MB = 5  # Houlsby bottleneck


def lora_all_linear(s: Sizes, r: int) -> int:
    """r · (d_in + d_out) per map: q, k, v, attention output (D × D), the two feed-forward maps (D ↔ F),
    and on the Longformer the global q, k, v."""
    square = 4 + (3 if s.longformer else 0)
    return s.L * r * (square * 2 * s.D + 2 * (s.D + s.F))


def bitfit_all(s: Sizes) -> int:
    """Embedding LayerNorm + per layer b_q, b_k, b_v, b_m1, b_LN1, b_m3, b_LN2 (D) and b_m2 (F); Longformer: global b_q, b_k, b_v."""
    return s.D + s.L * (7 * s.D + s.F + (3 * s.D if s.longformer else 0))


def qv_maps(s: Sizes) -> int:
    """peft's default targets on BERT and RoBERTa (BERT's on the Longformer): query and value, D × D each."""
    return 2 * s.L


def lokr_per_map(s: Sizes) -> int:
    """LoKr on a D × D map: W1 (a × a) ⊗ W2 (b × b) with D = a · b split by peft's `factorization(D)` (the
    factor pair nearest √D, smaller first); W2 is full unless r < b / 2 (then b·r + r·b)."""
    from peft.tuners.lokr.layer import factorization

    a, b = factorization(s.D, -1)
    w2 = 2 * b * 8 if 8 < b / 2 else b * b
    return a * a + w2


def adalora_map(d_in: int, d_out: int, r: int = 12) -> int:
    """AdaLoRA's P (d_out × r), Q (r × d_in), Λ (r) and the rank count it keeps as a parameter (1)."""
    return r * (d_in + d_out) + r + 1


def adalora_params(s: Sizes) -> int:
    """peft's AdaLoRA targets: query, value on BERT (and the Longformer); on RoBERTa query, key, value and every
    "dense" (attention output D × D, intermediate D → F, output F → D)."""
    if s.family == "roberta":
        return s.L * (4 * adalora_map(s.D, s.D) + adalora_map(s.D, s.F) + adalora_map(s.F, s.D))
    return qv_maps(s) * adalora_map(s.D, s.D)


def adalora_maps(s: Sizes) -> int:
    """How many maps AdaLoRA adapts: one frozen rank count each."""
    return s.L * 6 if s.family == "roberta" else qv_maps(s)


def p_tuning_mlp(s: Sizes, n: int, h: int = 128) -> int:
    """n embeddings (n × D) and peft's MLP D → h → h → D, with biases."""
    return n * s.D + (s.D * h + h) + (h * h + h) + (h * s.D + s.D)


LORA_R = 8  # peft's default rank, kept by the LoRA family's named methods

METHOD_CASES = [
    MethodCase("fine-tuning", "fine-tuning", unfrozen=ALL),
    MethodCase("prefix-tuning", "prefix-tuning", {"prefix_length": J}, lambda s: 2 * J * s.L * s.D, prefix_keys=J),
    MethodCase(
        "prefix-tuning-mlp",
        "prefix-tuning",
        {"prefix_length": J, "reparameterize": True, "mlp_hidden": MLP},
        # embedding (j × D) + Linear(D, mlp) + Linear(mlp, 2·L·D)
        lambda s: J * s.D + (s.D * MLP + MLP) + (MLP * 2 * s.L * s.D + 2 * s.L * s.D),
        prefix_keys=J,
    ),
    MethodCase(
        "prefix-tuning-peft-layout",
        "prefix-tuning",
        {"prefix_length": J, "layout": "peft"},
        lambda s: 2 * J * s.L * s.D,
        prefix_keys=J,
        families=("bert", "roberta"),
    ),
    MethodCase(
        "prefix-propagation",
        "prefix-propagation",
        {"prefix_length": J},
        lambda s: J * s.L * s.D,
        prefix_keys=J,
        prefix_queries=J,
    ),
    MethodCase(
        "kernel-alpha-trained",
        "kernel-prefix-propagation",
        {"prefix_length": J, "alpha_trainable": True},
        lambda s: J * s.L * s.D + s.L,
        prefix_keys=J,
        prefix_queries=J,
    ),  # + one log α per layer
    MethodCase(
        "kernel-rbf-polynomial",
        "kernel-prefix-propagation",
        {"prefix_length": J, "kernel": "rbf", "sequence_kernel": "polynomial"},
        lambda s: J * s.L * s.D,
        prefix_keys=J,
        prefix_queries=J,
    ),  # a fixed α is a buffer
    MethodCase(
        "tiny-attention", "tiny-attention", {"n_heads": M, "head_dim": DH}, lambda s: 4 * s.D * M * DH * s.L
    ),  # W_Q, W_K, W_V, O per layer, no biases
    MethodCase("tiny-attention-parallel", "tiny-attention", {"placement": "parallel"}, lambda s: 4 * s.D * s.L),
    MethodCase(
        "lora",
        "lora",
        {},  # r = 8 on query, value: 2·r·D per D × D map
        lambda s: s.L * 2 * (2 * 8 * s.D),
    ),
    MethodCase(
        "lora-qkv",
        "lora",
        {"r": R, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": "query,key,value"},
        lambda s: s.L * 3 * (2 * R * s.D),
    ),
    MethodCase("lora-all-linear", "lora", {"r": R, "target_modules": "all-linear"}, lambda s: lora_all_linear(s, R)),
    MethodCase(
        "ia3",
        "ia3",
        {},  # peft's BERT targets: l_k, l_v, attention output input (D), l_ff (F)
        lambda s: s.L * (3 * s.D + s.F),
    ),
    MethodCase("ia3-paper", "ia3", {"targets": "paper"}, lambda s: s.L * (2 * s.D + s.F)),
    MethodCase(
        "prompt-tuning", "prompt-tuning", {"prompt_length": N}, lambda s: N * s.D, prefix_keys=N, prefix_queries=N
    ),
    MethodCase(
        "prompt-tuning-random",
        "prompt-tuning",
        {"prompt_length": 1, "init": "random"},
        lambda s: s.D,
        prefix_keys=1,
        prefix_queries=1,
    ),
    MethodCase(
        "prompt-tuning-peft-layout",
        "prompt-tuning",
        {"prompt_length": N, "layout": "peft"},
        lambda s: N * s.D,
        prefix_keys=N,
        prefix_queries=N,
        families=("bert", "roberta"),
    ),
    MethodCase("bitfit", "bitfit", {}, unfrozen=bitfit_all),
    MethodCase(
        "bitfit-query-intermediate",
        "bitfit",
        {"biases": "query_and_intermediate"},
        unfrozen=lambda s: s.L * (s.D + s.F + (s.D if s.longformer else 0)),
    ),  # b_q (+ global b_q), b_m2
    MethodCase(
        "houlsby-adapter",
        "houlsby-adapter",
        {"bottleneck": MB},
        lambda s: s.L * 2 * (2 * MB * s.D + s.D + MB),
        unfrozen=lambda s: 2 * s.D * (2 * s.L + 1),
    ),  # gain and shift of 2·L + 1 LayerNorms
    MethodCase(
        "houlsby-adapter-frozen-ln",
        "houlsby-adapter",
        {"bottleneck": MB, "train_layer_norm": False},
        lambda s: s.L * 2 * (2 * MB * s.D + s.D + MB),
    ),
    # the peft tuners (peft_tuner.py), at peft's defaults on peft's targets: r·(d_in + d_out) per map for LoRA
    MethodCase(
        "dora",
        "dora",
        {},  # LoRA's A, B and the magnitude m (d_out) per map
        lambda s: qv_maps(s) * (2 * LORA_R * s.D + s.D),
    ),
    MethodCase("rslora", "rslora", {}, lambda s: qv_maps(s) * 2 * LORA_R * s.D),
    MethodCase("pissa", "pissa", {}, lambda s: qv_maps(s) * 2 * LORA_R * s.D),
    MethodCase("olora", "olora", {}, lambda s: qv_maps(s) * 2 * LORA_R * s.D),
    MethodCase("lora-plus", "lora-plus", {"r": R, "loraplus_lr_ratio": 4.0}, lambda s: qv_maps(s) * 2 * R * s.D),
    MethodCase(
        "monteclora",
        "monteclora",
        {"r": R, "num_samples": 3, "use_entropy": True},  # LoRA's A, B and the sampler's s (r) and e (N) per map
        lambda s: qv_maps(s) * (2 * R * s.D + R + 3),
    ),
    MethodCase("adalora", "adalora", {}, adalora_params, frozen=adalora_maps),
    MethodCase(
        "vera",
        "vera",
        {},  # Λ_d (r = 256) and Λ_b (d_out) per map; the random A, B are frozen buffers
        lambda s: qv_maps(s) * (256 + s.D),
    ),
    MethodCase(
        "loha",
        "loha",
        {},  # two rank-8 pairs per map
        lambda s: qv_maps(s) * 2 * 2 * LORA_R * s.D,
    ),
    MethodCase("lokr", "lokr", {}, lambda s: qv_maps(s) * lokr_per_map(s)),
    MethodCase(
        "oft",
        "oft",
        {},  # D / 32 blocks of 32 × 32, each stored as its 32·31/2 skew-symmetric entries
        lambda s: qv_maps(s) * (s.D // 32) * (32 * 31 // 2),
    ),
    MethodCase(
        "boft",
        "boft",
        {},  # D / 4 blocks of 4 × 4 (one butterfly factor) and a scale per output
        lambda s: qv_maps(s) * ((s.D // 4) * 16 + s.D),
    ),
    MethodCase("hra", "hra", {}, lambda s: qv_maps(s) * LORA_R * s.D),  # r Householder vectors of length D
    MethodCase("fourierft", "fourierft", {}, lambda s: qv_maps(s) * 1000),  # 1,000 spectral coefficients per map
    MethodCase(
        "vblora",
        "vblora",
        {},  # the bank (256 × 32), and per map the top-k logits of A's and B's sub-vectors
        lambda s: 256 * 32 + qv_maps(s) * 2 * 4 * (s.D // 32) * 256,
    ),
    MethodCase(
        "ln-tuning",
        "ln-tuning",
        {},  # a trainable copy of every LayerNorm: embeddings' and 2 per layer
        lambda s: (2 * s.L + 1) * 2 * s.D,
    ),
    MethodCase(
        "p-tuning", "p-tuning", {"prompt_length": N}, lambda s: p_tuning_mlp(s, N), prefix_keys=N, prefix_queries=N
    ),
    MethodCase(
        "p-tuning-lstm-peft-layout",
        "p-tuning",
        {
            "prompt_length": N,
            "encoder_reparameterization_type": "LSTM",
            "encoder_hidden_size": 8,
            "layout": "peft",
        },  # a 2-layer bidirectional LSTM D → 8 (×2 directions), then MLP 16 → 16 → D
        lambda s: N * s.D + lstm_params(s.D, 8, 2) + (16 * 16 + 16) + (16 * s.D + s.D),
        prefix_keys=N,
        prefix_queries=N,
        families=("bert", "roberta"),
    ),
    MethodCase(
        "peft-randlora",
        "peft:RANDLORA",
        {},  # any peft type: RandLoRA's λ (r × n) and γ (n × D), n = ⌈D / r⌉
        lambda s: qv_maps(s) * (32 * -(-s.D // 32) + -(-s.D // 32) * s.D),
    ),
]


def lstm_params(d_in: int, h: int, layers: int) -> int:
    """A bidirectional LSTM: per layer and direction 4·h·(input + h) weights and 2 · 4·h biases."""
    total, width = 0, d_in
    for _ in range(layers):
        total += 2 * (4 * h * (width + h) + 2 * 4 * h)
        width = 2 * h
    return total
