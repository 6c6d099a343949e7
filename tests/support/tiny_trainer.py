"""A Hugging Face Trainer on a tiny BERT built from config, for the callback's tests: seconds, offline.

The task is learnable (the label is the first token's id mod 3), so the probabilities change from
evaluation to evaluation; the weights do not matter otherwise.
"""

from __future__ import annotations

import numpy as np
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

LABEL_NAMES = ["alpha", "beta", "gamma"]
MODEL_NAME = "tiny-bert-config"  # the name the model gives itself (a model built from config has none)


def tiny_bert(seed: int = 0, lora: bool = True):
    """A 2-layer BERT classifier over 3 named classes; with a peft LoRA (r=4 on query, value) unless told not."""
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label=dict(enumerate(LABEL_NAMES)),
        label2id={name: i for i, name in enumerate(LABEL_NAMES)},
    )
    model = BertForSequenceClassification(config)
    model.config.name_or_path = MODEL_NAME
    return (
        get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"]))
        if lora
        else model
    )


def token_split(n: int, seed: int, labelled: bool = True) -> Dataset:
    """n examples of 12 random tokens; label = first token mod 3."""
    ids = np.random.default_rng(seed).integers(1, 100, (n, 12))  # (n, 12)
    columns = {"input_ids": ids.tolist(), "attention_mask": np.ones_like(ids).tolist()}
    if labelled:
        columns["labels"] = (ids[:, 0] % 3).tolist()
    return Dataset.from_dict(columns)


def tiny_trainer(output_dir, callbacks: list, eval_dataset, model=None, train_dataset=None, **arguments) -> Trainer:
    """A Trainer on 64 training examples (`token_split` unless given), batch 8 (8 steps an epoch), 3 epochs and an
    evaluation each unless `arguments` say otherwise; no checkpoints, no trackers unless report_to is given."""
    settings = {
        "num_train_epochs": 3,
        "eval_strategy": "epoch",
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 7,
        "learning_rate": 1e-2,
        "report_to": "none",
        "save_strategy": "no",
        "use_cpu": True,
        "seed": 0,
    } | arguments
    args = TrainingArguments(output_dir=str(output_dir), **settings)
    return Trainer(
        model=model or tiny_bert(),
        args=args,
        train_dataset=train_dataset or token_split(64, seed=1),
        eval_dataset=eval_dataset,
        callbacks=callbacks,
    )
