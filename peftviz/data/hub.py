"""The papers' datasets by short name (`HUB_DATASETS`), via `datasets.load_dataset` (the hub or its cache).

Each keeps the splits it has; a test split whose labels are hidden (GLUE's, all -1) is dropped, a
lone validation split becomes test, and what is still missing is cut from train
(`peftviz.data.text_data`). Offline without a cached copy, a name is one line: not available here.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
from datasets import load_dataset

from peftviz.data.text_data import SPLITS, TextData, complete_splits, label_array, split_features
from peftviz.errors import DataError


@dataclass(frozen=True)
class HubSource:
    """Where one of the papers' datasets lives on the hub and which columns hold text and label."""

    path: str
    config: str | None = None
    text_columns: tuple[str, ...] = ("text",)  # several are joined with a newline (sentence pairs)
    label_column: str = "label"
    label_names: tuple[str, ...] | None = None  # used when the label column is not a ClassLabel

    @property
    def id(self) -> str:
        return f"{self.path}/{self.config}" if self.config else self.path


# SetFit's labels are the ids of scikit-learn's fetch_20newsgroups, whose names are sorted.
NEWSGROUPS = (
    "alt.atheism",
    "comp.graphics",
    "comp.os.ms-windows.misc",
    "comp.sys.ibm.pc.hardware",
    "comp.sys.mac.hardware",
    "comp.windows.x",
    "misc.forsale",
    "rec.autos",
    "rec.motorcycles",
    "rec.sport.baseball",
    "rec.sport.hockey",
    "sci.crypt",
    "sci.electronics",
    "sci.med",
    "sci.space",
    "soc.religion.christian",
    "talk.politics.guns",
    "talk.politics.mideast",
    "talk.politics.misc",
    "talk.religion.misc",
)

HUB_DATASETS: dict[str, HubSource] = {
    "20newsgroups": HubSource("SetFit/20_newsgroups", label_names=NEWSGROUPS),
    "hyperpartisan": HubSource(
        "SemEvalWorkshop/hyperpartisan_news_detection",
        "byarticle",
        label_column="hyperpartisan",
        label_names=("not-hyperpartisan", "hyperpartisan"),
    ),
    # The paper (Appendix B) uses the "no_ref" config: the default one leaks labels through the references.
    "arxiv": HubSource("ccdv/arxiv-classification", "no_ref"),
    "sst2": HubSource("glue", "sst2", text_columns=("sentence",)),
    "rte": HubSource("glue", "rte", text_columns=("sentence1", "sentence2")),
}


def load_hub(short_name: str, seed: int) -> TextData:
    """The dataset `short_name` of `HUB_DATASETS` in our three splits (missing ones cut by `seed`)."""
    source = HUB_DATASETS[short_name]
    try:
        raw = load_dataset(source.path, source.config)
    except Exception as err:  # offline, missing cache, gated, removed: all mean "not available here"
        raise DataError(
            f"cannot load '{short_name}' ({source.id}) from the Hugging Face hub or its cache: {type(err).__name__}"
        ) from err
    label_names = _hub_label_names(raw, source, short_name)
    features = split_features(label_names)
    parts = {
        split: _hub_split(raw[split], source, features)
        for split in SPLITS
        if split in raw and _has_labels(raw[split], source)
    }
    return TextData(short_name, complete_splits(parts, seed, label_names, short_name), label_names)


def _hub_label_names(raw: datasets.DatasetDict, source: HubSource, short_name: str) -> list[str]:
    feature = next(iter(raw.values())).features.get(source.label_column)
    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    if source.label_names is None:
        column = source.label_column
        raise DataError(f"'{short_name}' ({source.id}) has no label names: its '{column}' is not a ClassLabel")
    return list(source.label_names)


def _has_labels(split: datasets.Dataset, source: HubSource) -> bool:
    """False for GLUE-style test sets whose labels are all -1 (hidden)."""
    labels = label_array(split, source.label_column)
    return len(labels) > 0 and bool((labels >= 0).all())


def _hub_split(split: datasets.Dataset, source: HubSource, features: datasets.Features) -> datasets.Dataset:
    """Only "text" and an int "label" column, cast to our ClassLabel, staying in Arrow (arxiv is large)."""
    columns = source.text_columns

    def convert(batch: dict) -> dict:
        texts = ["\n".join(parts) for parts in zip(*(batch[c] for c in columns))]
        return {"text": texts, "label": [int(v) for v in batch[source.label_column]]}

    simple = columns == ("text",) and source.label_column == "label"
    if not simple:
        keep = [c for c in split.column_names if c not in {"text", "label"}]
        split = split.map(convert, batched=True, remove_columns=keep)
    return split.select_columns(["text", "label"]).cast(features)
