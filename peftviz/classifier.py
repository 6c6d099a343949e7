"""The text classifier: a pretrained encoder, one tuning method, and a classification head.

It sits above both `modeling` (the encoders) and `methods` (which attach to them): neither imports it.

`build_classifier` refuses, with a one-line ConfigError and before the method touches the encoder,
a `max_length` beyond the encoder's positions (plus any the method embeds with the text): that is
known only once the encoder is loaded, so the config cannot check it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from peftviz.errors import ConfigError
from peftviz.methods import make_method
from peftviz.methods.base import PeftMethod
from peftviz.modeling import longformer
from peftviz.modeling.backbones import check_max_length, encode
from peftviz.modeling.longformer import BandedAttention, LocalAttention

POOLINGS = ("cls", "mean")


def _n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@dataclass
class ClassifierOutput:
    logits: Tensor  # (B, C)
    # per layer (B, H, Tq, Tk): weights over [prefix keys; sequence keys] for every query,
    # the first `n_prefix_queries` queries being prefix positions (prefix-propagation only);
    # on a Longformer the same weights in banded form (see longformer.BandedAttention)
    attentions: list[Tensor | BandedAttention] | None = None
    n_prefix_queries: int = 0


class ClassificationHead(nn.Module):
    """RoBERTa's head: pooled (B, D) -> dropout, dense, tanh, dropout, projection -> logits (B, C)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, pooled: Tensor) -> Tensor:
        x = torch.tanh(self.dense(self.dropout(pooled)))
        return self.out_proj(self.dropout(x))


class PeftClassifier(nn.Module):
    """Encoder + method + head.

    forward(input_ids (B, T), attention_mask (B, T)) -> ClassifierOutput(logits (B, C)).
    The head reads the text's first token ([CLS] / <s>, after any prefix positions) or, with
    pooling="mean", the mean of the text tokens. Only the method's parameters and the head train,
    unless the method trains the backbone (fine-tuning).
    """

    def __init__(self, encoder, method: PeftMethod, num_labels: int, pooling: str = "cls", head_dropout: float = 0.1):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}")
        self.encoder = encoder
        self.method = method
        self.pooling = pooling
        self.head = ClassificationHead(encoder.config.hidden_size, num_labels, head_dropout)
        encoder.requires_grad_(method.trains_backbone)
        self._n_pretrained = _n_params(encoder)  # before the method adds anything to the encoder
        method.attach(encoder)

    @property
    def num_labels(self) -> int:
        return self.head.out_proj.out_features

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_attentions: bool = False,
    ) -> ClassifierOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        n_prefix = self.method.n_prefix_queries
        ctx = self.method.new_context(input_ids.shape[0], record=output_attentions)
        hidden = encode(self.encoder, input_ids, attention_mask, token_type_ids, ctx, n_prefix)
        hidden = hidden.last_hidden_state  # (B, j + T, D)
        text = hidden[:, n_prefix:]  # (B, T, D)
        if self.pooling == "cls":
            pooled = hidden[:, self.method.pooled_position]  # the text's first token, unless the method says
        else:
            weights = attention_mask.unsqueeze(-1).to(text.dtype)  # (B, T, 1)
            pooled = (text * weights).sum(1) / weights.sum(1).clamp_min(1)
        attentions = [ctx.attentions[i] for i in sorted(ctx.attentions)] if output_attentions else None
        return ClassifierOutput(self.head(pooled), attentions, n_prefix)

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each encoder layer's activations in the backward pass instead of keeping them.

        Non-reentrant checkpointing (torch's recommended form): gradients reach the method's
        parameters even where no input of a layer requires grad (a frozen backbone), and dropout is
        replayed from the same random state, so loss and gradients are those without it. The
        methods' hooks on a layer run outside its checkpoint, those on its parts inside (replayed)."""
        self.encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})

    def set_local_attention(self, path: LocalAttention) -> None:
        """How a Longformer encoder's windowed attention runs (`longformer.set_local_attention`): "blocks" or
        "flex". A ConfigError for "flex" on an encoder without windows (BERT, RoBERTa: nothing would change)."""
        if not longformer.set_local_attention(self.encoder, path) and path != "blocks":
            raise ConfigError(
                f"local attention {path}: only Longformer encoders have a windowed attention, "
                f"and this {self.encoder.config.model_type} encoder has none; use blocks"
            )

    def parameter_counts(self) -> dict[str, int]:
        """Parameter counts: backbone (the pretrained encoder), method (its own modules plus what it
        injected into the encoder, e.g. peft's LoRA matrices), head, total, and trainable."""
        backbone, head = self._n_pretrained, _n_params(self.head)
        method = _n_params(self.method) + _n_params(self.encoder) - backbone
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return {
            "backbone": backbone,
            "method": method,
            "head": head,
            "total": backbone + method + head,
            "trainable": trainable,
        }

    def trainable_state_dict(self) -> dict[str, Tensor]:
        """The trained parameters (method, head, and the backbone only if it trains) and buffers of the method."""
        trainable = {name for name, p in self.named_parameters() if p.requires_grad}
        return {
            name: tensor.detach()
            for name, tensor in self.state_dict().items()
            if name in trainable or name.startswith("method.")
        }


def build_classifier(
    encoder,
    method: str,
    num_labels: int,
    options: dict | None = None,
    pooling: str = "cls",
    head_dropout: float = 0.1,
    max_length: int | None = None,
) -> PeftClassifier:
    """Attach method `method` (with its config `options`) and a head to `encoder`. With `max_length`
    (the config's tokens per document), raise ConfigError first if the encoder cannot take that many."""
    tuning = make_method(method, encoder.config, **(options or {}))
    if max_length is not None:
        check_max_length(encoder, max_length, tuning.added_positions)
    return PeftClassifier(encoder, tuning, num_labels, pooling, head_dropout)


def method_counts(model: str, methods: list[str], num_labels: int = 5) -> list[dict]:
    """One row per method: its parameter counts at its defaults on encoder `model` (what `methods --counts` prints).
    One encoder serves every method: each is attached, counted and removed again."""
    from peftviz.modeling.backbones import load_encoder

    encoder, _ = load_encoder(model)
    rows = []
    for name in methods:
        classifier = build_classifier(encoder, name, num_labels)
        counts = classifier.parameter_counts()
        classifier.method.remove_hooks()
        rows.append(
            {
                "method": name,
                "method params": counts["method"],
                "trainable params": counts["trainable"],
                "trainable %": 100 * counts["trainable"] / counts["total"],
                "backbone": counts["backbone"],
                "head": counts["head"],
            }
        )
    return rows
