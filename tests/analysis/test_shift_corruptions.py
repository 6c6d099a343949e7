"""The corrupted test sets of calibration under shift: seeded, the stated share of words at each severity on the
shipped corpus, the text's own spacing kept, and hostile input refused in one line."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peftviz.analysis.shift import FAMILIES, SEVERITIES, SHARES
from peftviz.analysis.shift.corruptions import changed_share, corrupt_text, corrupt_texts
from peftviz.analysis.shift.shifts import Shift, corruption_grid, parse_families, parse_severities
from peftviz.errors import ConfigError

CHARACTER_FAMILIES = ("typo", "keyboard", "ocr")
# OCR confuses some characters only (o/0, l/1, ...): a chosen word without one stays as it is, about one in five
# on the BBC corpus, so its measured share is about 0.8 of the stated one
SHARE_RATIO = {"typo": (0.95, 1.05), "keyboard": (0.95, 1.05), "ocr": (0.7, 0.9), "word-deletion": (0.97, 1.05)}


@pytest.fixture(scope="module")
def bbc_test_texts() -> list[str]:
    from peftviz.data.loading import load_data

    return load_data("bbc-news", seed=0, limit=1000).splits["test"]["text"]


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_changes_about_the_stated_share_of_words_at_each_severity(family, bbc_test_texts):
    texts = bbc_test_texts[:80]
    for severity in SEVERITIES[1:]:
        measured = np.mean([changed_share(a, b, family) for a, b in zip(texts, corrupt_texts(texts, family, severity))])
        low, high = SHARE_RATIO[family]
        assert low * SHARES[severity - 1] <= measured <= high * SHARES[severity - 1], (severity, measured)


def test_severity_0_is_the_text_itself_and_shares_rise_with_severity(bbc_test_texts):
    texts = bbc_test_texts[:20]
    for family in FAMILIES:
        assert corrupt_texts(texts, family, 0) == texts
        shares = [
            np.mean([changed_share(a, b, family) for a, b in zip(texts, corrupt_texts(texts, family, s))])
            for s in SEVERITIES
        ]
        assert shares[0] == 0 and all(b > a for a, b in itertools.pairwise(shares))


def test_the_same_seed_gives_the_same_text_in_any_order_and_another_seed_another(bbc_test_texts):
    texts = bbc_test_texts[:12]
    for family in FAMILIES:
        once = corrupt_texts(texts, family, 3, seed=0)
        assert corrupt_texts(texts, family, 3, seed=0) == once
        backwards = [corrupt_text(texts[i], family, 3, 0, i) for i in reversed(range(len(texts)))]
        assert backwards[::-1] == once
        assert corrupt_texts(texts, family, 3, seed=1) != once


def test_the_global_random_generators_are_left_as_they_were(bbc_test_texts):
    import random

    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    corrupt_texts(bbc_test_texts[:3], "keyboard", 5)
    assert (random.random(), np.random.random()) == expected


def test_character_families_keep_every_word_in_place_and_the_spacing(bbc_test_texts):
    text = bbc_test_texts[0]
    assert "\n" in text  # paragraphs: the spacing a tokenizer of punctuation would lose
    for family in CHARACTER_FAMILIES:
        out = corrupt_text(text, family, 5, 0, 0)
        assert re.sub(r"\S+", "w", out) == re.sub(r"\S+", "w", text)
        assert out != text


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=80), family=st.sampled_from(FAMILIES), severity=st.sampled_from(SEVERITIES))
def test_any_text_is_corrupted_without_error_and_character_families_keep_the_word_count(text, family, severity):
    out = corrupt_text(text, family, severity, 0, 0)
    assert isinstance(out, str)
    if family != "word-deletion":
        assert len(out.split()) == len(text.split())
    else:
        assert len(out.split()) <= len(text.split())


# ---------------------------------------------------------------- hostile input


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Shift("typos", 1), "unknown corruption family 'typos'"),
        (lambda: Shift("typo", 6), "severity must be one of 0, 1, 2, 3, 4, 5"),
        (lambda: Shift("typo", -1), "severity must be one of"),
        (lambda: Shift("typo", True), "severity must be one of"),
        (lambda: Shift("typo", 2.0), "severity must be one of"),
        (lambda: Shift("domain", 1, "x.csv"), "a domain shift names a dataset and has no severity"),
        (lambda: Shift("domain", None, " "), "a domain shift names a dataset"),
        (lambda: parse_families("typo,bogus"), "unknown corruption family 'bogus'"),
        (lambda: parse_families(""), "name at least one corruption family"),
        (lambda: parse_families("ocr,ocr"), "each corruption family once"),
        (lambda: parse_severities("0,9"), "severity must be one of"),
        (lambda: parse_severities("1-x"), "severities are whole numbers 0 to 5"),
        (lambda: parse_severities("2,2"), "name each severity once"),
        (lambda: parse_severities("3-1"), "name each severity once, at least one"),
    ],
)
def test_hostile_shifts_are_refused_in_one_line(make, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        make()
    assert "\n" not in str(err.value)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=30))
def test_any_families_or_severities_text_parses_or_is_refused_in_one_line(text):
    for parse in (parse_families, parse_severities):
        try:
            parsed = parse(text)
        except ConfigError as err:
            assert "\n" not in str(err) and str(err)
        else:
            assert parsed and len(set(parsed)) == len(parsed)


def test_the_grid_has_the_clean_set_once_then_every_family_and_severity():
    grid = corruption_grid(("typo", "ocr"), (0, 2, 5))
    assert [s.name for s in grid] == ["clean", "typo 2", "typo 5", "ocr 2", "ocr 5"]
    assert [s.name for s in corruption_grid(("typo",), (1,))] == ["typo 1"]


# ---------------------------------------------------------------- the cache file, hostile


def _npz(path, arrays) -> None:
    with open(path, "wb") as file:
        np.savez(file, **arrays)


GOOD = {
    "key": np.array("k" * 64),
    "probs": np.full((4, 3), 1 / 3, dtype=np.float32),
    "labels": np.array([0, 1, 2, 0], dtype=np.int64),
    "seconds_per_1000": np.float64(1.5),
}


def test_a_sound_cache_file_reads_back_and_the_key_must_match(tmp_path):
    from peftviz.analysis.shift.evaluate import read_shifted
    from peftviz.errors import RunError

    path = tmp_path / "typo-1-k.npz"
    _npz(path, GOOD)
    assert read_shifted(path, "k" * 64, 3)["probs"].shape == (4, 3)
    with pytest.raises(RunError, match="key does not match"):
        read_shifted(path, "x" * 64, 3)


FLOATS = st.one_of(st.floats(-3, 3), st.sampled_from([np.nan, np.inf, -np.inf]))
ARRAYS = st.one_of(
    st.sampled_from([np.float32, np.float64]).flatmap(
        lambda dtype: st.lists(FLOATS, max_size=12).map(lambda values: np.array(values, dtype=dtype))
    ),
    st.lists(st.integers(-3, 5), max_size=12).map(lambda values: np.array(values, dtype=np.int64)),
    st.lists(FLOATS, min_size=6, max_size=6).map(lambda values: np.array(values, dtype=np.float32).reshape(2, 3)),
    st.just(np.array("k" * 64)),
    st.just(np.float64(-1)),
)


@settings(max_examples=80, deadline=None)
@given(changed=st.dictionaries(st.sampled_from([*GOOD, "extra"]), ARRAYS, min_size=1, max_size=3))
def test_any_damaged_member_is_refused_in_one_line_naming_the_file(tmp_path_factory, changed):
    from peftviz.analysis.shift.evaluate import read_shifted
    from peftviz.errors import RunError

    path = tmp_path_factory.mktemp("cache") / "typo-1-k.npz"
    _npz(path, GOOD | changed)
    try:
        arrays = read_shifted(path, "k" * 64, 3)
    except RunError as err:
        assert "typo-1-k.npz" in str(err) and "\n" not in str(err)
    else:  # read back: every member sound
        assert arrays["probs"].shape[1] == 3 and np.isfinite(arrays["probs"]).all()
        assert set(arrays["labels"]) <= {0, 1, 2} and arrays["seconds_per_1000"] >= 0
