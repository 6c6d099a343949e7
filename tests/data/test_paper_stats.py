"""The recorded sizes and lengths of the paper's datasets (`peftviz.data.paper_stats`), checked against the paper's
Table 6 typed here, against peftviz's own split code, and against the published numbers the lengths derive from."""

import itertools
import math
import re

import datasets
import pytest
from scipy.stats import lognorm, norm

from peftviz.data import paper_stats
from peftviz.data.hub import HUB_DATASETS
from peftviz.data.paper_stats import DATASET_STATS, dataset_stats
from peftviz.data.text_data import complete_splits
from peftviz.errors import ConfigError

# Table 6 of the prefix-propagation paper: documents, classes, train/dev/test percentages (rounded as printed).
TABLE_6 = {
    "hyperpartisan": (645, 2, (80, 10, 10)),
    "20newsgroups": (18846, 20, (60, 20, 20)),
    "arxiv": (33388, 11, (85, 7.5, 7.5)),
}
# the smallest step of the percentages the paper prints: a recorded split within half of it follows the paper.
PRINTED_STEP = {"hyperpartisan": 10, "20newsgroups": 10, "arxiv": 2.5}
# 20 newsgroups keeps the hub's date-based test split (7,532 of 18,846, 40%), not the paper's 60/20/20
FOLLOWS_TABLE_6_SPLIT = {"hyperpartisan": True, "20newsgroups": False, "arxiv": True}

# what each recorded length distribution was derived from: (quantile or "mean", value), as published
PUBLISHED_LENGTHS = {
    "hyperpartisan": [("mean", 705), (0.95, 1975)],  # Longformer Table 6, wordpieces
    "20newsgroups": [(0.5, 83), ("mean", 185.8)],  # whitespace words of SetFit/20_newsgroups train
    "arxiv": [("mean", 56458.0), (1 / 28389, 2852)],  # mteb's train characters: mean, minimum of 28,388
}


@pytest.mark.parametrize("name", sorted(TABLE_6))
def test_documents_and_classes_are_table_6_s(name):
    documents, classes, _ = TABLE_6[name]
    stats = dataset_stats(name)
    assert sum(stats.splits.values()) == documents and stats.documents == documents
    assert stats.num_labels == classes
    assert set(stats.splits) == {"train", "validation", "test"} and min(stats.splits.values()) > 0


@pytest.mark.parametrize("name", sorted(TABLE_6))
def test_splits_follow_table_6_within_its_rounding_or_say_they_do_not(name):
    documents, _, percentages = TABLE_6[name]
    shares = [100 * DATASET_STATS[name].splits[s] / documents for s in ("train", "validation", "test")]
    within = all(abs(share - printed) <= PRINTED_STEP[name] / 2 for share, printed in zip(shares, percentages))
    assert within == FOLLOWS_TABLE_6_SPLIT[name], shares
    if not within:
        assert "peftviz keeps" in DATASET_STATS[name].source  # the difference is written down


def _split_sizes(parts: dict[str, list[int]]) -> dict[str, int]:
    """The sizes peftviz's loader gives splits with these labels (missing ones cut from train)."""
    features = datasets.Features({"label": datasets.ClassLabel(num_classes=max(max(v) for v in parts.values()) + 1)})
    made = {s: datasets.Dataset.from_dict({"label": labels}, features=features) for s, labels in parts.items()}
    names = [str(i) for i in range(features["label"].num_classes)]
    return {s: len(d) for s, d in complete_splits(made, 0, names, "test").items()}


def test_recorded_splits_are_what_the_loader_cuts_from_the_hub_s_splits():
    hyperpartisan = [0] * 407 + [1] * 238  # byarticle: train only (zenodo: 238 hyperpartisan, 407 not)
    assert _split_sizes({"train": hyperpartisan}) == DATASET_STATS["hyperpartisan"].splits
    per_class = [480, 584, 591, 590, 578, 593, 585, 594, 598, 597, 600, 595, 591, 594, 593, 599, 546, 564, 465, 377]
    train = [label for label, n in enumerate(per_class) for _ in range(n)]
    test = [i % 20 for i in range(7532)]
    assert _split_sizes({"train": train, "test": test}) == DATASET_STATS["20newsgroups"].splits
    assert len(train) == 11314  # scikit-learn's 20news-bydate train


@pytest.mark.parametrize("name", sorted(TABLE_6))
def test_quantiles_rise_with_q_and_units_are_named(name):
    stats = dataset_stats(name)
    qs = sorted(stats.length_quantiles)
    assert all(0 < q <= 1 for q in qs)
    values = [stats.length_quantiles[q] for q in qs]
    assert all(a < b for a, b in itertools.pairwise(values)) and values[0] > 0
    assert stats.tokenizer and "derived" in stats.source


@pytest.mark.parametrize("name", sorted(PUBLISHED_LENGTHS))
def test_recorded_quantiles_reproduce_the_published_numbers_they_derive_from(name):
    """Refit a log-normal to the recorded median and 95th percentile (scipy, not the module's formulas) and read
    the published numbers back: equal within the rounding of the recorded quantiles to whole tokens."""
    recorded = dataset_stats(name).length_quantiles
    sigma = (math.log(recorded[0.95]) - math.log(recorded[0.5])) / norm.ppf(0.95)
    fitted = lognorm(s=sigma, scale=recorded[0.5])
    for what, value in PUBLISHED_LENGTHS[name]:
        back = fitted.mean() if what == "mean" else fitted.ppf(what)
        assert back == pytest.approx(value, rel=0.01), (what, back, value)


def test_an_unknown_name_is_one_line_naming_those_recorded():
    with pytest.raises(ConfigError) as err:
        dataset_stats("nope")
    message = str(err.value)
    assert "\n" not in message and "'nope'" in message
    assert re.search(r"recorded: 20newsgroups, arxiv, hyperpartisan$", message)


def test_arxiv_is_the_paper_s_no_ref_config_everywhere():
    assert HUB_DATASETS["arxiv"].path == "ccdv/arxiv-classification" and HUB_DATASETS["arxiv"].config == "no_ref"
    assert "no_ref" in DATASET_STATS["arxiv"].source
    assert set(DATASET_STATS) == set(TABLE_6) and set(DATASET_STATS) <= set(HUB_DATASETS)


def test_the_token_ratios_are_what_bbc_news_and_minilm_give():
    """TOKENS_PER_WORD and TOKENS_PER_CHARACTER, recounted: MiniLM's WordPiece tokens of bbc-news train."""
    from transformers import AutoTokenizer

    from peftviz.data.loading import load_data
    from peftviz.modeling.backbones import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    texts = list(load_data("bbc-news").splits["train"]["text"])
    tokens = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    assert tokens / sum(len(t.split()) for t in texts) == pytest.approx(paper_stats.TOKENS_PER_WORD, abs=5e-4)
    assert tokens / sum(len(t) for t in texts) == pytest.approx(paper_stats.TOKENS_PER_CHARACTER, abs=5e-5)


@pytest.mark.parametrize(
    ("name", "ratio"),
    [
        ("hyperpartisan", 1.0),
        ("20newsgroups", paper_stats.TOKENS_PER_WORD),
        ("arxiv", paper_stats.TOKENS_PER_CHARACTER),
    ],
)
def test_token_quantiles_convert_the_published_unit(name, ratio):
    stats = paper_stats.dataset_stats(name)
    for q, length in stats.length_quantiles.items():
        assert stats.token_quantiles[q] == pytest.approx(length * ratio)
