"""Corrupted copies of a test split: four families of noise at severities 1 … 5, seeded, offline.

    family         what happens to each chosen word                     nlpaug augmenter
    typo           two adjacent characters swap                         RandomCharAug(action="swap")
    keyboard       one character becomes a key next to it (QWERTY)      KeyboardAug
    ocr            one character becomes one OCR confuses it with       OcrAug
    word-deletion  the word is deleted                                  RandomWordAug(action="delete")

At severity s a share SHARES[s - 1] of each document's words is chosen (⌈share · n_words⌉, nlpaug's
count; words too short for the family, one letter for the character families, are never chosen, so a
document's share can fall below it), and each chosen word gets one corruption. Severity 0 is the text
itself. A word is a run of non-space characters: the character families keep every word in place and the
original whitespace between them; word deletion joins what remains with single spaces (what a WordPiece
tokenizer, MiniLM's, splits on anyway).

Why nlpaug (Ma, 2019): the maintained library of text augmentation whose character augmenters work offline
from mappings it ships (the QWERTY neighbours, the OCR confusions); the word augmenters that need a model
or a dictionary download are not used. Its own tokenizer splits punctuation off words and joins it back
with spaces ("Blair's" → "Blair ' s"), a change at every severity that the shares would not count, so the
augmenters here get a whitespace tokenizer that keeps each document's spacing.

Seeding: nlpaug draws from Python's `random` and NumPy's global generators, so each document is corrupted
with both seeded from (seed, family, severity, document index) and their previous states restored after:
the same seed gives the same text, in any order, in any process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import random
import re
from collections.abc import Iterator, Sequence

import numpy as np

from peftviz.analysis.shift import FAMILIES, SEVERITIES, SHARES
from peftviz.errors import ConfigError

WORD = re.compile(r"\S+")


def check_family(family: str) -> str:
    if family not in FAMILIES:
        raise ConfigError(f"unknown corruption family {family!r}: choose from {', '.join(FAMILIES)}")
    return family


def check_severity(severity: int) -> int:
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or severity not in SEVERITIES:
        raise ConfigError(f"severity must be one of {', '.join(map(str, SEVERITIES))}, not {severity!r}")
    return int(severity)


def share(severity: int) -> float:
    """The share of words chosen at `severity` (0 at severity 0)."""
    return 0.0 if check_severity(severity) == 0 else SHARES[severity - 1]


@functools.cache
def _augmenter(family: str, severity: int):
    """nlpaug's augmenter of `family` at `severity` (built once per process; nlpaug imports pandas, so late)."""
    import nlpaug.augmenter.char as nac
    import nlpaug.augmenter.word as naw

    p = share(severity)
    one_character = {"aug_word_p": p, "aug_word_max": None, "aug_char_min": 1, "aug_char_max": 1, "min_char": 2}
    if family == "typo":
        return nac.RandomCharAug(action="swap", swap_mode="adjacent", **one_character)
    if family == "keyboard":
        return nac.KeyboardAug(include_special_char=False, include_numeric=False, **one_character)
    if family == "ocr":
        return nac.OcrAug(**one_character)
    return naw.RandomWordAug(action="delete", aug_p=p, aug_max=None, aug_min=1)


def document_seed(seed: int, family: str, severity: int, index: int) -> int:
    """A 64-bit seed of one document's corruption, the same in every process (no `hash()`: it is salted)."""
    digest = hashlib.sha256(f"{seed}|{family}|{severity}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@contextlib.contextmanager
def seeded_globals(value: int) -> Iterator[None]:
    """Python's and NumPy's global generators seeded with `value`, their states restored after."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    random.seed(value)
    np.random.seed(value % 2**32)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _spacing_keeper(text: str):
    """nlpaug's (tokenizer, reverse_tokenizer) for `text`: its words (runs of non-space characters), joined
    back with the text's own whitespace while their number is unchanged (character families), with single
    spaces otherwise (word deletion)."""
    spans = [m.span() for m in WORD.finditer(text)]
    words = [text[a:b] for a, b in spans]
    gaps = [text[: spans[0][0]], *(text[b:a] for (_, b), (a, _) in itertools.pairwise(spans)), text[spans[-1][1] :]]

    def join(tokens: list[str]) -> str:
        if len(tokens) != len(words):
            return " ".join(tokens)
        return "".join(gap + token for gap, token in zip(gaps, tokens)) + gaps[-1]

    return (lambda _: list(words)), join


def corrupt_text(text: str, family: str, severity: int, seed: int, index: int) -> str:
    """Document `index` of a split corrupted by `family` at `severity` (the text itself at severity 0)."""
    check_family(family)
    if check_severity(severity) == 0 or not text.strip():
        return text
    augmenter = _augmenter(family, severity)
    augmenter.tokenizer, augmenter.reverse_tokenizer = _spacing_keeper(text)
    with seeded_globals(document_seed(seed, family, severity, index)):
        out = augmenter.augment(text)
    return out[0] if isinstance(out, list) else out


def corrupt_texts(texts: Sequence[str], family: str, severity: int, seed: int = 0) -> list[str]:
    """Every text corrupted (see `corrupt_text`); document i is seeded by its position i."""
    return [corrupt_text(text, family, severity, seed, index) for index, text in enumerate(texts)]


def changed_share(original: str, corrupted: str, family: str) -> float:
    """The share of `original`'s words the corruption changed: words no longer equal in place (character
    families), or words gone (word deletion). What the SHARES state, measured."""
    before, after = original.split(), corrupted.split()
    if not before:
        return 0.0
    if family == "word-deletion":
        return 1.0 - len(after) / len(before)
    if len(after) != len(before):
        raise ValueError(f"{family} changed the number of words: {len(before)} → {len(after)}")
    return sum(a != b for a, b in zip(before, after)) / len(before)
