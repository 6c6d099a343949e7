"""Small builders the tests share: tiny random classifiers and padded batches."""

import torch

from peftviz import build_classifier, tiny_encoder

BERT_FAMILIES = ("bert", "roberta")  # self-attention through transformers' AttentionInterface
FAMILIES = (*BERT_FAMILIES, "longformer")  # peftviz's own banded attention (longformer.py)


def tiny_classifier(method: str, family: str = "bert", num_labels: int = 3, seed: int = 0, **options):
    """A classifier on a random tiny encoder, in eval mode, with method parameters seeded."""
    encoder = tiny_encoder(family, seed=seed)
    torch.manual_seed(seed + 1)
    return build_classifier(encoder, method, num_labels, options).eval()


def padded_batch(lengths=(9, 5), seed: int = 0):
    """Random token ids (avoiding special and pad ids) with right padding: (B, T) ids and mask."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(5, 120, (len(lengths), T), generator=g)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids, mask
