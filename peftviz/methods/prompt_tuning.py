"""Prompt tuning, a soft prompt at the input only (Lester et al., EMNLP 2021): a baseline.

n trainable vectors P (n × D) are prepended to the embedded text, and nothing else changes:

    D^(1) = cat(P, C)                (the first layer reads the prompt, then the text)
    D^(l) = layer_{l-1}(D^(l-1))     (later layers: the prompt positions are ordinary positions)

It is prefix-propagation (eq. 1 of Li et al. 2023) without the P^(l) added at layers l > 1, and
the same conventions hold: C is the embedding layer's output and P is prepended after it, so the
prompt positions get no position or token-type embedding and the text positions are not shifted
by n. The head pools after the prompt (`n_prefix_queries` = n), the padding mask is extended by
n, and the attention analyses treat the prompt positions as prefix keys. On a Longformer the
prompt positions are global tokens, as prefix-propagation's are.

Initialisation (Lester et al.'s best, and peft's SAMPLE_VOCAB): n tokens drawn uniformly from
the vocabulary. Because P enters after the embedding layer, each row starts as what the
embedding layer makes of those tokens (word + position + token-type embedding, LayerNorm): a
raw word embedding is about ten times smaller than an embedded token on MiniLM (norm ~1 vs ~10).
"random" draws U(−0.5, 0.5), Lester et al.'s random initialisation.

Why not peft's own prompt tuning: `peft.inject_adapter_in_model` refuses prompt-learning methods
("does not support prompt learning"), and `get_peft_model` wraps the model in a PeftModel whose
forward embeds input_ids itself and calls the encoder with `inputs_embeds = cat(prompt, word
embeddings)` and a 0/1 mask widened by n. That puts the prompt through the position embeddings
(shifting the text by n), bypasses peftviz's classifier (its per-forward AttentionContext, its
additive padding bias and its pooling after the prefix), and does not fit peftviz's Longformer,
which takes no inputs_embeds. The method is therefore this small module; the init mirrors
peft's `PromptEmbedding` (SAMPLE_VOCAB / RANDOM).

layout="peft" is Hugging Face peft's prompt tuning, for runs meant for `export` and for imported
peft adapters: P lives in the word-embedding space and goes through the embedding layer with
the text, D^(1) = Embed(cat(P, word embeddings of C)), so the prompt takes positions 0 … n−1
(and the token-type and LayerNorm of the embedding layer) and the text is shifted by n; and the
head reads the first prompt position, as BERT's pooler and RoBERTa's head read position 0 of
what peft feeds them. sample-vocab then starts P at the raw word embeddings of the drawn tokens
(peft's SAMPLE_VOCAB). BERT and RoBERTa only.

Bounds: n from 1 to MAX_PROMPT_LENGTH = 1024 (Lester et al. try 1 to 150; 1024 is twice a BERT's
whole input), refused before the (n × D) prompt is allocated. The prompt positions enter after the
embedding layer, so they take no position embeddings: `max_length` alone must fit the encoder
(with layout="peft", max_length + n must).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from peftviz.errors import ConfigError
from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.prefix_tuning import check_peft_layout
from peftviz.methods.registration import registered
from peftviz.modeling.attention_function import AttentionContext
from peftviz.modeling.backbones import encoder_layers
from peftviz.options import option

MAX_PROMPT_LENGTH = 1024


@dataclass
class PromptTuningConfig(MethodConfig):
    prompt_length: int = option(
        20,
        "n, soft prompt tokens in front of the text (Lester et al.: 20 gives most of the gain; prefix methods' j is 8)",
        at_least=1,
        at_most=MAX_PROMPT_LENGTH,
    )
    init: Literal["sample-vocab", "random"] = option(
        "sample-vocab",
        "sample-vocab: embedded tokens drawn from the vocabulary (Lester et al.; peft's SAMPLE_VOCAB); "
        "random: U(-0.5, 0.5)",
    )
    layout: Literal["paper", "peft"] = option(
        "paper",
        "paper: the prompt enters after the embedding layer, the text keeps positions 0, 1, ... and the head reads "
        "its first token; peft: as Hugging Face peft, the prompt is fed through the embedding layer at positions "
        "0 … n-1 with the text after it, and the head reads the first prompt position: needed to export the run "
        "as a peft adapter (BERT and RoBERTa)",
    )


@registered
class PromptTuning(PeftMethod):
    """input_ids (B, T) -> hidden (B, n + T, D), the first n positions being the soft prompt.

    Parameters: the prompt, an (n, D) matrix: n·D.
    """

    config_class = PromptTuningConfig
    from_the_papers = False
    prefix_keys = True
    peft_type = "PROMPT_TUNING"
    peft_names = {"prompt_length": "num_virtual_tokens"}
    # the presets' default rate suits it, as it suits the prefixes (Lester et al. train T5's prompts
    # at 0.3, with Adafactor)
    learning_rate_grid = (5e-4, 0.3)

    def __init__(self, config: PromptTuningConfig, encoder_config):
        super().__init__(config, encoder_config)
        self.prompt = nn.Parameter(torch.empty(config.prompt_length, self.hidden_size).uniform_(-0.5, 0.5))

    def prompt_vectors(self) -> Tensor:
        """P, the (n, D) prompt in front of the text."""
        return self.prompt

    @property
    def n_prefix_queries(self) -> int:
        return self.config.prompt_length

    @property
    def added_positions(self) -> int:
        return self.config.prompt_length if self.config.layout == "peft" else 0  # the prompt takes 0 … n-1

    @property
    def pooled_position(self) -> int:
        return 0 if self.config.layout == "peft" else self.config.prompt_length

    def new_context(self, batch_size: int, record: bool = False) -> AttentionContext:
        return AttentionContext(n_prefix_keys=self.config.prompt_length, record=record)

    def attach(self, encoder) -> None:
        if self.config.layout == "peft":
            check_peft_layout(encoder, self.name)
        if getattr(self.config, "init", None) == "sample-vocab":
            self._init_from_vocabulary(encoder)
        if self.config.layout == "peft":
            hook = encoder.embeddings.register_forward_pre_hook(self._embed_with_prompt, with_kwargs=True)
        else:
            hook = encoder_layers(encoder)[0].register_forward_pre_hook(self._prepend, with_kwargs=True)
        self._hooks.append(hook)

    @torch.no_grad()
    def _init_from_vocabulary(self, encoder) -> None:
        """Each row: the embedding layer's output for a token drawn uniformly from the vocabulary."""
        embeddings = encoder.embeddings
        vocab_size = embeddings.word_embeddings.num_embeddings
        # drawn on the CPU (the same tokens for a seed whatever the device), then put where the
        # embedding layer is: the encoder may already be on the GPU while the prompt is not yet
        ids = torch.randint(0, vocab_size, (1, self.config.prompt_length))
        ids = ids.to(embeddings.word_embeddings.weight.device)
        if self.config.layout == "peft":  # peft's SAMPLE_VOCAB: the raw word embeddings
            self.prompt.copy_(embeddings.word_embeddings(ids)[0].to(self.prompt.dtype))
            return
        was_training = embeddings.training
        embeddings.eval()  # no dropout in the initial values
        try:
            embedded = embeddings(input_ids=ids)  # (1, n, D)
        finally:
            embeddings.train(was_training)
        self.prompt.copy_(embedded[0].to(self.prompt.dtype))

    def _prepend(self, module, args, kwargs):
        if kwargs.get("peftviz") is None:  # not run by peftviz's classifier: no room made for the prompt
            return None
        hidden, *rest = args
        prompt = self.prompt_vectors().to(hidden.dtype).unsqueeze(0).expand(hidden.shape[0], -1, -1)  # (B, n, D)
        return (torch.cat([prompt, hidden], dim=1), *rest), kwargs  # (B, n + T, D): cat(P, C)

    def _embed_with_prompt(self, module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is None:  # already embedded by someone else: nothing to prepend to
            return None
        words = module.word_embeddings(ids)  # (B, T, D)
        prompt = self.prompt_vectors().to(words.dtype).unsqueeze(0).expand(ids.shape[0], -1, -1)  # (B, n, D)
        return args, {**kwargs, "input_ids": None, "inputs_embeds": torch.cat([prompt, words], dim=1)}  # (B, n + T, D)

    def peft_config(self) -> dict:
        if self.config.layout != "peft":
            raise ConfigError(
                f"{self.name}: layout={self.config.layout!r} has no exact peft form: train with layout=peft"
            )
        return {"num_virtual_tokens": self.config.prompt_length}

    def peft_prompt(self) -> Tensor:
        return self.prompt_vectors().detach()  # (n, D): peft's prompt_embeddings

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        return {"prompt_length": adapter.get("num_virtual_tokens"), "init": "random", "layout": "peft"}

    @classmethod
    def prompt_state(cls, embeddings: Tensor) -> dict[str, Tensor]:
        return {"method.prompt": embeddings}
