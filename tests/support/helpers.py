"""What the tests share: tiny random classifiers and padded batches; the plotly charts of a page in AppTest.

Imported by conftest.py, so it does not import streamlit: the chart helpers take an AppTest already made.
"""

import base64
import contextlib
import functools
import json
import signal

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

from peftviz import build_classifier, tiny_encoder

BERT_FAMILIES = ("bert", "roberta")  # self-attention through transformers' AttentionInterface
FAMILIES = (*BERT_FAMILIES, "longformer")  # peftviz's own banded attention (longformer.py)

# the fuzz tests' settings: the same examples on every run (no database), no per-example deadline
# (a loaded CI machine is slow), and fixtures shared by the examples of one test on purpose
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def tiny_classifier(method: str, family: str = "bert", num_labels: int = 3, seed: int = 0, **options):
    """A classifier on a random tiny encoder, in eval mode, with method parameters seeded."""
    encoder = tiny_encoder(family, seed=seed)
    torch.manual_seed(seed + 1)
    return build_classifier(encoder, method, num_labels, options).eval()


# The tiny Longformer's method options (prefix length 3) and padding patterns, shared by the tests that compare
# its attention paths: several windows, one row padded past a whole window, lengths not a multiple of s.
LONG_OPTIONS = {
    "prefix-tuning": {"prefix_length": 3},
    "prefix-propagation": {"prefix_length": 3},
    "kernel-prefix-propagation": {"prefix_length": 3, "alpha": 0.3},
    "tiny-attention": {"n_heads": 2},
}
PADDINGS = [(29, 18), (13,), (40, 40, 7)]


def padded_batch(lengths=(9, 5), seed: int = 0):
    """Random token ids (avoiding special and pad ids) with right padding: (B, T) ids and mask."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(5, 120, (len(lengths), T), generator=g)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids, mask


def charts(at) -> dict[str, dict]:
    """The plotly charts a Streamlit AppTest shows, in page order, by widget key: key -> the chart's JSON
    spec ("data", "layout", ...) with its plotly config under "config". Every chart must have a unique key."""
    found = {}
    for element in at.get("plotly_chart"):
        key = element.key
        assert key is not None and key not in found, f"plotly chart without a unique widget key: {key!r}"
        found[key] = json.loads(element.proto.spec) | {"config": json.loads(element.proto.config)}
    return found


def plotly_array(value) -> np.ndarray:
    """An array of a plotly JSON spec: a plain list, or a typed array {"dtype", "bdata" (base64), "shape"}
    as plotly writes numpy arrays (no "shape" for 1-d)."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        return flat if shape is None else flat.reshape([int(n) for n in str(shape).split(",")])
    return np.asarray(value)


@contextlib.contextmanager
def hard_timeout(seconds: int):
    """Fail the test, instead of hanging the run, if the block takes longer (SIGALRM; pytest has no timeout)."""

    def on_alarm(signum, frame):
        pytest.fail(f"took longer than {seconds} s: blocked or reading forever")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def give_params_a_wrong_shape(folder, prefix: str = "") -> str:
    """Replace the first tensor (whose name starts with `prefix`) of a run's params.safetensors by a (7, 7)
    one, keeping its metadata: a file that lists (its header is whole) but does not fit the model.
    Returns the tensor's name."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    path = str(folder / "params.safetensors")
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    state = load_file(path)
    name = min(name for name in state if name.startswith(prefix))
    state[name] = torch.zeros(7, 7)
    save_file(state, path, metadata=metadata)
    return name


def each_case_within(seconds: int):
    """Put under Hypothesis's @given: every generated case runs under `hard_timeout(seconds)`."""

    def decorate(test):
        @functools.wraps(test)
        def within(*args, **kwargs):
            with hard_timeout(seconds):
                return test(*args, **kwargs)

        return within

    return decorate


# ---------------------------------------------------------------- a group's bootstrap, written out


def seed_values_and_draws(runs, metric: str, which="test", n_resamples: int = 60, seed: int = 0, n_bins: int = 10):
    """Each run's point value (S,) and its draws (S, R) on one set of resampled example rows, from the
    estimators directly (the rows as `stats.resample_indices` draws them)."""
    from peftviz.calibration import estimators

    n_examples = len(runs[0].predictions(which)[1])
    rows = np.random.default_rng(seed).integers(0, n_examples, size=(n_resamples, n_examples))
    values = [estimators.point_estimates(*run.predictions(which), n_bins, "width", [metric])[metric] for run in runs]
    draws = [
        estimators.bootstrap_samples(*run.predictions(which), rows, n_bins, "width", [metric])[metric] for run in runs
    ]
    return np.array(values), np.stack(draws)


def two_level_by_hand(draws: np.ndarray, seed: int = 0) -> np.ndarray:
    """m*_r = the mean over resampled seeds of draws[seed, r], the seeds drawn as `stats.seed_rows` draws them."""
    n_seeds, n_resamples = draws.shape
    rows = np.random.default_rng([seed, 1, 0]).integers(0, n_seeds, size=(n_resamples, n_seeds))
    return np.array([draws[rows[r], r].mean() for r in range(n_resamples)])


# ---------------------------------------------------------------- tiny model folders

TINY_WORDS = ("the", "news", "sport", "film", "bank", *"abcdefghijklmnopqrstuvwxyz")


def tiny_tokenizer(family: str = "bert"):
    """A real tokenizer of a few dozen tokens: BERT's WordPiece, or RoBERTa's byte-level BPE (RoBERTa, Longformer)."""
    from transformers import BertTokenizer, RobertaTokenizer

    if family == "bert":
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS, *(f"##{c}" for c in TINY_WORDS[5:])]
        return BertTokenizer(vocab={word: i for i, word in enumerate(words)})
    words = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", *TINY_WORDS, "Ġ", "th", "Ġthe"]
    merges = [("t", "h"), ("th", "e"), ("Ġ", "the")]
    return RobertaTokenizer(vocab={word: i for i, word in enumerate(words)}, merges=merges)


def tiny_model_folder(folder, family: str = "bert", seed: int = 0):
    """A model folder as `save_pretrained` writes one: config.json, model.safetensors and a tiny tokenizer's
    files (tokenizer.json, tokenizer_config.json), usable as `TrainConfig.model`. Returns the folder."""
    tokenizer = tiny_tokenizer("bert" if family == "bert" else "roberta")
    encoder = tiny_encoder(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, seed=seed)
    encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_report(argv: list[str]) -> tuple[int, str, str]:
    """`peftviz report ARGV` in this process: (exit status, stdout, stderr); argparse's refusals end as their status."""
    import io

    from peftviz.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["report", *argv])
        except SystemExit as exit_:  # argparse refusing an option
            code = exit_.code
    return code, out.getvalue(), err.getvalue()
