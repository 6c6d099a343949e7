"""Recorded sizes and length quantiles of the prefix-propagation paper's datasets, offline, with sources.

A plan (how many steps, how long each) needs each dataset's size and length distribution before
anything is downloaded. `DATASET_STATS` records them for the paper's three long-document datasets
under their `peftviz.data.hub.HUB_DATASETS` names; every number says where it comes from. Lengths
are in the unit each entry's `tokenizer` names, as published: RoBERTa BPE tokens for Hyperpartisan,
whitespace words for 20 newsgroups and characters for ArXiv (no source found gives those two in
model tokens). A plan needs tokens, so `token_quantiles` converts words and characters with
ratios measured offline on the shipped bbc-news corpus (train split, 1,701 articles) with MiniLM's
WordPiece tokenizer: 1.262 tokens per whitespace word, 0.2143 per character (4.67 characters a
token); tests/data/test_paper_stats.py recounts them. They are English news, not newsgroup posts
or papers, and WordPiece, not Longformer's BPE: an estimate, stated as one.

Splits are the documents per split as `peftviz.data.hub.load_hub` produces them: the hub
dataset's own splits are kept, and missing ones are cut from train per class
(`peftviz.data.text_data.complete_splits`): a class of n_c documents gives validation (and test,
when missing) k_c = max(1, floor(0.1 n_c + 0.5)) each.

Lengths where only a mean m and a 95th percentile p95 are published are derived from a
log-normal through both (a stated model, not a measurement): ln L ~ N(mu, sigma^2) with

    m = exp(mu + sigma^2 / 2),   p95 = exp(mu + z95 sigma),   z95 = Phi^-1(0.95) = 1.6449

so sigma^2 / 2 - z95 sigma + ln(p95 / m) = 0, sigma = z95 - sqrt(z95^2 - 2 ln(p95 / m)) (the root
that keeps the median below the mean), and the q-quantile is exp(mu + Phi^-1(q) sigma).

Sources:
- Prefix-propagation paper (Li et al., ACL 2023), Table 6: HY 645 documents, 2 classes, 80/10/10;
  NG 18,846, 20 classes, 60/20/20; ArXiv 33,388, 11 classes, 85/7.5/7.5. Appendix B: "we use
  the no_ref version" of ccdv/arxiv-classification.
- Longformer (Beltagy et al., 2020, arXiv:2004.05150v2), Table 6 (p. 7): Hyperpartisan
  average 705 and 95th percentile 1,975 wordpieces (RoBERTa's BPE, Longformer's tokenizer).
- Hub card of SemEvalWorkshop/hyperpartisan_news_detection (README.md, config byarticle):
  one split, train, 645 examples; zenodo record 1489920: 238 hyperpartisan, 407 not.
- 20 newsgroups: scikit-learn's 20news-bydate (SetFit/20_newsgroups is its copy with headers,
  signatures and quotes removed): 11,314 train and 7,532 test
  (https://scikit-learn.org/1.2/datasets/real_world.html); its train documents per class, as
  printed by a tutorial with np.bincount(fetch_20newsgroups_vectorized().target) (they sum to
  11,314); lengths in whitespace words of SetFit/20_newsgroups train: median 83, mean 185.8
  (https://khoatr35.github.io/learning-so-deep/assignment-1/text/dataset-eda.html).
- ArXiv: mteb's descriptive statistics of ccdv/arxiv-classification (embeddings-benchmark/mteb,
  mteb/descriptive_stats/Classification/ArxivClassification.json, commit
  10569ee1c9bcd4b532a6b706db6c4a2442b20781): train 28,388,
  test 2,500, 11 labels; train lengths in characters: min 2,852, mean 56,458.0, of the default
  config (with references: the no_ref documents are shorter).

Lengths published as a median and a mean use a log-normal through both: mu = ln(median),
sigma^2 = 2 ln(mean / median). Lengths published as a minimum over N documents and a mean use a
log-normal whose 1/(N+1) quantile is the minimum: with z = Phi^-1(1/(N+1)),
sigma^2 / 2 - z sigma - ln(mean / min) = 0, sigma = z + sqrt(z^2 + 2 ln(mean / min)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from peftviz.errors import ConfigError

QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.95)  # the q of a derived length distribution
# model tokens per unit of length, measured on bbc-news train with MiniLM's WordPiece (module docstring)
TOKENS_PER_WORD = 1.262
TOKENS_PER_CHARACTER = 0.2143


@dataclass(frozen=True)
class DatasetStats:
    """One dataset's recorded sizes and lengths, and where every number comes from."""

    splits: dict[str, int]  # documents per split as peftviz loads it: "train", "validation", "test"
    num_labels: int
    tokenizer: str  # whose tokens the lengths count (e.g. "roberta-base BPE", "BERT wordpieces")
    length_quantiles: dict[float, int]  # quantile q in (0, 1] -> tokens at q (untruncated document length)
    source: str  # where every number comes from: paper/table/URL; what was derived and how
    tokens_per_unit: float = 1.0  # model tokens per unit of `length_quantiles` (1: they are tokens)

    @property
    def documents(self) -> int:
        return sum(self.splits.values())

    @property
    def token_quantiles(self) -> dict[float, float]:
        """Quantile q -> model tokens at q: the recorded lengths times `tokens_per_unit`."""
        return {q: length * self.tokens_per_unit for q, length in self.length_quantiles.items()}


def lognormal_quantiles(mean: float, p95: float, quantiles: tuple[float, ...] = QUANTILES) -> dict[float, int]:
    """Quantiles of the log-normal whose mean is `mean` and whose 95th percentile is `p95` (module docstring)."""
    z95 = NormalDist().inv_cdf(0.95)
    log_ratio = math.log(p95 / mean)
    if not 0 < log_ratio < z95**2 / 2:
        raise ConfigError(f"no log-normal has mean {mean} and 95th percentile {p95}")
    sigma = z95 - math.sqrt(z95**2 - 2 * log_ratio)
    mu = math.log(mean) - sigma**2 / 2
    return {q: round(math.exp(mu + NormalDist().inv_cdf(q) * sigma)) for q in quantiles}


def median_mean_quantiles(median: float, mean: float, quantiles: tuple[float, ...] = QUANTILES) -> dict[float, int]:
    """Quantiles of the log-normal whose median is `median` and whose mean is `mean` (module docstring)."""
    if not 0 < median < mean:
        raise ConfigError(f"no log-normal has median {median} and mean {mean}")
    sigma = math.sqrt(2 * math.log(mean / median))
    return {q: round(median * math.exp(NormalDist().inv_cdf(q) * sigma)) for q in quantiles}


def min_mean_quantiles(
    minimum: float, mean: float, documents: int, quantiles: tuple[float, ...] = QUANTILES
) -> dict[float, int]:
    """Quantiles of the log-normal with mean `mean` whose 1/(documents + 1) quantile is `minimum` (docstring)."""
    if not 0 < minimum < mean:
        raise ConfigError(f"no log-normal has minimum {minimum} and mean {mean}")
    z = NormalDist().inv_cdf(1 / (documents + 1))  # negative
    sigma = z + math.sqrt(z**2 + 2 * math.log(mean / minimum))
    mu = math.log(mean) - sigma**2 / 2
    return {q: round(math.exp(mu + NormalDist().inv_cdf(q) * sigma)) for q in quantiles}


def _held_out(class_sizes: tuple[int, ...]) -> int:
    """Documents `complete_splits` cuts from train for one missing split: k_c per class (module docstring)."""
    return sum(max(1, int(0.1 * n + 0.5)) for n in class_sizes)


# Hyperpartisan (byarticle): the hub has train only; validation and test are both cut from it.
_HY_CLASSES = (407, 238)  # not hyperpartisan, hyperpartisan (zenodo record 1489920)
_HY_HELD_OUT = _held_out(_HY_CLASSES)

# 20 newsgroups: the hub has train and test; validation is cut from train.
_NG_TRAIN_CLASSES = (480, 584, 591, 590, 578, 593, 585, 594, 598, 597, 600, 595, 591, 594, 593, 599, 546, 564, 465, 377)
_NG_TEST = 7532
_NG_HELD_OUT = _held_out(_NG_TRAIN_CLASSES)

# ArXiv: the hub has all three splits; validation is what Table 6's 33,388 leaves.
_AX_TRAIN, _AX_TEST, _AX_DOCUMENTS = 28388, 2500, 33388

DATASET_STATS: dict[str, DatasetStats] = {
    "hyperpartisan": DatasetStats(
        splits={"train": sum(_HY_CLASSES) - 2 * _HY_HELD_OUT, "validation": _HY_HELD_OUT, "test": _HY_HELD_OUT},
        num_labels=2,
        tokenizer="roberta-base BPE (Longformer's 'wordpieces')",
        length_quantiles=lognormal_quantiles(705, 1975),
        source=(
            "documents: hub card SemEvalWorkshop/hyperpartisan_news_detection (byarticle: train 645) and "
            "zenodo.org/record/1489920 (238 hyperpartisan, 407 not); paper Table 6: 645, 2 classes, 80/10/10. "
            "splits: derived, peftviz cuts validation and test from train, k_c = max(1, floor(0.1 n_c + 0.5)) "
            "per class. lengths: derived, log-normal through Longformer (arXiv:2004.05150v2) Table 6: mean 705, "
            "95th percentile 1,975 wordpieces"
        ),
    ),
    "20newsgroups": DatasetStats(
        splits={
            "train": sum(_NG_TRAIN_CLASSES) - _NG_HELD_OUT,
            "validation": _NG_HELD_OUT,
            "test": _NG_TEST,
        },
        num_labels=20,
        tokenizer="whitespace words (not model tokens)",
        length_quantiles=median_mean_quantiles(83, 185.8),
        tokens_per_unit=TOKENS_PER_WORD,
        source=(
            "documents: scikit-learn 20news-bydate, 11,314 train and 7,532 test "
            "(scikit-learn.org/1.2/datasets/real_world.html, the paper's footnote 11); train per class from "
            "np.bincount(fetch_20newsgroups_vectorized().target) as a tutorial prints it (sum 11,314); paper "
            "Table 6: 18,846, 20 classes, 60/20/20 (peftviz keeps the hub's date-based test split instead). "
            "splits: derived, peftviz cuts validation from train, k_c = max(1, floor(0.1 n_c + 0.5)) per class. "
            "lengths: derived, log-normal through median 83 and mean 185.8 whitespace words of SetFit/20_newsgroups "
            "train (khoatr35.github.io/learning-so-deep/assignment-1/text/dataset-eda.html)"
        ),
    ),
    "arxiv": DatasetStats(
        splits={"train": _AX_TRAIN, "validation": _AX_DOCUMENTS - _AX_TRAIN - _AX_TEST, "test": _AX_TEST},
        num_labels=11,
        tokenizer="characters (not model tokens), default config with references",
        length_quantiles=min_mean_quantiles(2852, 56458.0, _AX_TRAIN),
        tokens_per_unit=TOKENS_PER_CHARACTER,
        source=(
            "documents: mteb descriptive stats of ccdv/arxiv-classification (github.com/embeddings-benchmark/mteb "
            "mteb/descriptive_stats/Classification/ArxivClassification.json, commit 10569ee1): train 28,388, "
            "test 2,500, 11 labels; validation derived: paper Table 6's 33,388 (85/7.5/7.5) less train and test; "
            "peftviz loads config no_ref (paper Appendix B). lengths: derived, log-normal with mean 56,458.0 "
            "characters and its 1/28,389 quantile at the minimum 2,852 characters of mteb's train statistics "
            "(default config: the no_ref documents, without references, are shorter)"
        ),
    ),
}


def dataset_stats(name: str) -> DatasetStats:
    """The recorded stats of `name`, or one line naming the datasets that have them."""
    if name not in DATASET_STATS:
        known = ", ".join(sorted(DATASET_STATS))
        raise ConfigError(f"no recorded sizes and lengths for dataset '{name}'; recorded: {known}")
    return DATASET_STATS[name]
