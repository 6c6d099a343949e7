"""P-tuning, a soft prompt made by a prompt encoder (Liu et al., "GPT Understands, Too", 2021): a baseline.

As prompt tuning (prompt_tuning.py), n vectors are prepended to the embedded text, but they are not
free parameters: a small network makes them from n trained embeddings e_1 … e_n,

    P = MLP(e)       = W_3 ReLU(W_2 ReLU(W_1 e + b_1) + b_2) + b_3         (peft's default, "MLP")
    P = MLP(LSTM(e))  a bidirectional LSTM, then a two-layer MLP          ("LSTM", the paper's)

which the paper finds trains more stably than free prompt vectors. The prompt encoder is peft's own
(`peft.tuners.p_tuning.PromptEncoder` with a `PromptEncoderConfig`); where P enters the encoder,
the positions and the pooling are prompt tuning's, with its two layouts (paper / peft).

Exchange with peft: a layout=peft run exports as peft's P_TUNING adapter (the prompt encoder's state is
copied into peft's, and peft saves the prompt P it makes, not the encoder). peft loads that P and uses it
as it is, and the encoder cannot be rebuilt from P, so `import` reads a P_TUNING adapter as a prompt-tuning
run of that prompt (`imports_as`): the same predictions, no encoder to train further.

Parameters (MLP, hidden size h): n·D + (D·h + h) + (h·h + h) + (h·D + D).
Bounds: n as prompt tuning's; h from 1 to MAX_ENCODER_HIDDEN = 4096; LSTM layers from 1 to 8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from peftviz.errors import ConfigError
from peftviz.methods.base import MethodConfig, PeftMethod
from peftviz.methods.prompt_tuning import MAX_PROMPT_LENGTH, PromptTuning
from peftviz.methods.registration import registered
from peftviz.options import option

MAX_ENCODER_HIDDEN = 4096
NOT_IMPORTED = (
    "a p-tuning adapter saved by peft keeps only the prompt its encoder made, not the encoder: it imports as "
    "prompt-tuning"
)


@dataclass
class PTuningConfig(MethodConfig):
    prompt_length: int = option(20, "n, prompt tokens in front of the text", at_least=1, at_most=MAX_PROMPT_LENGTH)
    encoder_reparameterization_type: Literal["MLP", "LSTM"] = option(
        "MLP", "how the prompt encoder makes P from its embeddings: MLP (peft's default) or LSTM (the paper's)"
    )
    encoder_hidden_size: int = option(
        128, "h, the prompt encoder's hidden size", at_least=1, at_most=MAX_ENCODER_HIDDEN
    )
    encoder_num_layers: int = option(2, "LSTM layers (LSTM only)", at_least=1, at_most=8)
    encoder_dropout: float = option(0.0, "dropout between LSTM layers (LSTM only)", at_least=0, below=1)
    layout: Literal["paper", "peft"] = option(
        "paper",
        "paper: the prompt enters after the embedding layer and the head reads the text's first token; peft: as "
        "Hugging Face peft, through the embedding layer at positions 0 … n-1 (needed to export as a peft adapter)",
    )


@registered
class PTuning(PromptTuning):
    """input_ids (B, T) -> hidden (B, n + T, D), the first n positions being P = prompt_encoder(0 … n-1).

    Parameters: the prompt encoder's (see the module docstring).
    """

    config_class = PTuningConfig
    peft_type = "P_TUNING"
    peft_based = True
    # peft saves the prompt P the encoder made (prompt_embeddings), not the encoder, and computes with P as it is
    # when it loads the adapter: a P_TUNING adapter, an export of this method included, is prompt tuning's
    imports_as = "prompt-tuning"

    def __init__(self, config: PTuningConfig, encoder_config):
        PeftMethod.__init__(self, config, encoder_config)  # not prompt tuning's free (n, D) prompt
        from peft import PromptEncoderConfig, PromptEncoderReparameterizationType
        from peft.tuners.p_tuning import PromptEncoder

        peft_config = PromptEncoderConfig(
            task_type="SEQ_CLS",
            num_virtual_tokens=config.prompt_length,
            token_dim=self.hidden_size,
            num_transformer_submodules=1,
            # peft's enum, not its value: peft 0.21's MLP encoder names it (`.value`) in a warning when
            # encoder_num_layers is not 2, and fails on a plain string
            encoder_reparameterization_type=PromptEncoderReparameterizationType(config.encoder_reparameterization_type),
            encoder_hidden_size=config.encoder_hidden_size,
            encoder_num_layers=config.encoder_num_layers,
            encoder_dropout=config.encoder_dropout,
        )
        self.prompt_encoder = PromptEncoder(peft_config)
        self.register_buffer("indices", torch.arange(config.prompt_length), persistent=False)

    def prompt_vectors(self) -> Tensor:
        return self.prompt_encoder(self.indices)  # (n, D)

    def peft_config(self) -> dict:
        config = self.config
        return super().peft_config() | {  # prompt tuning's: the layout checked, num_virtual_tokens
            "encoder_reparameterization_type": config.encoder_reparameterization_type,
            "encoder_hidden_size": config.encoder_hidden_size,
            "encoder_num_layers": config.encoder_num_layers,
            "encoder_dropout": config.encoder_dropout,
        }

    @classmethod
    def prompt_state(cls, embeddings: Tensor) -> dict[str, Tensor]:
        raise ConfigError(NOT_IMPORTED)

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        """Never a p-tuning run (`imports_as`): the MLP that made the saved prompt is not in the adapter."""
        raise ConfigError(NOT_IMPORTED)
