"""PeftvizCallback's boundary, generated: hostile Trainer setups, constructor arguments, labels and id2label.

Each generated case on a real `transformers.Trainer` over the tiny BERT of `tests.support.tiny_trainer` (2 steps
at most) ends one of two ways:

- refused in one line of peftviz's errors (`PeftvizError`, no line break): a bad argument when the callback is
  built; when training starts, before any step, with every byte of the store as it was (a store holding one
  run already); or at an evaluation it cannot record (labels outside the model's classes), the run then failed
  with that very line, its epochs kept, never left "training" or "incomplete";
- or a complete run, checked against what the case says it should hold (its points, splits and names).

The oracles are written here from the Trainer's rules (DefaultFlowCallback: when it evaluates) and the
callback's documented arguments, not read from the callback.
"""

from __future__ import annotations

import shutil
import tempfile
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from hypothesis import event, given, settings
from hypothesis import strategies as st
from transformers import TrainerCallback

from peftviz.errors import ConfigError, PeftvizError
from peftviz.integrations.transformers import PeftvizCallback
from peftviz.record import RecordError, open_run
from peftviz.store.runs import list_runs
from tests.support.helpers import FUZZ, each_case_within
from tests.support.tiny_trainer import LABEL_NAMES, MODEL_NAME, tiny_bert, tiny_trainer, token_split

# 16 training examples in batches of 8: one epoch is 2 steps; evaluation splits of 6 and 5 examples
TRAIN, VALIDATION, TEST = token_split(16, seed=1), token_split(6, seed=2), token_split(5, seed=3)
QUIET = {"disable_tqdm": True, "num_train_epochs": 1, "train_dataset": TRAIN}
CASE_SECONDS = 120
pytestmark = pytest.mark.usefixtures("one_thread")  # a tiny model on one thread: many times faster on a busy machine


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A store holding one complete recorded run: what a refusal must leave byte for byte."""
    store = tmp_path_factory.mktemp("template") / "runs"
    labels = np.array([0, 1, 2, 1])
    with open_run(
        "already-here", method="my-loop", model="m", dataset="d", label_names=LABEL_NAMES, runs_dir=store
    ) as run:
        run.add_epoch(labels, probs=np.eye(3)[labels] * 0.7 + 0.1)
    return store


def fresh_case(template: Path, root: Path) -> Path:
    """A folder of its own for one generated case, its store a copy of the template: (case)/runs."""
    case = Path(tempfile.mkdtemp(dir=root))
    shutil.copytree(template, case / "runs")
    return case


def snapshot(store: Path) -> dict:
    """Every file of the store, by its path inside it: its bytes."""
    return {path.relative_to(store): path.read_bytes() for path in sorted(store.rglob("*")) if path.is_file()}


def new_runs(store: Path) -> list:
    return [run for run in list_runs(store) if run.label != "already-here"]


def assert_one_line(err: BaseException, family=PeftvizError) -> str:
    assert isinstance(err, family), f"{type(err).__name__}: {err}"
    assert "\n" not in str(err) and str(err).strip()
    return str(err)


def train_refused_at_start(trainer, store: Path, family=PeftvizError) -> str:
    """trainer.train() refused in one line before any step, the store unchanged; the line."""
    before = snapshot(store)
    with pytest.raises(PeftvizError) as caught:
        trainer.train()
    assert trainer.state.global_step == 0
    assert snapshot(store) == before
    return assert_one_line(caught.value, family)


# ---------------------------------------------------------------------------------------------
# the Trainer's evaluations: strategy, delay, eval_on_start and the eval datasets' keys

DICT_KEYS = ["validation", "test", "dev", "", "eval", "Validation", 1, "held out"]
CALLBACK_KEYS = [("validation", "test"), ("dev", "test"), ("1", "held out")]


@st.composite
def evaluation_setups(draw) -> dict:
    strategy = draw(st.sampled_from(["no", "epoch", "steps"]))
    shape = draw(st.sampled_from(["single", "dict"] + (["none"] if strategy == "no" else [])))
    keys = draw(st.lists(st.sampled_from(DICT_KEYS), unique=True, max_size=3)) if shape == "dict" else None
    validation, test = draw(st.sampled_from(CALLBACK_KEYS))
    return {
        "strategy": strategy,
        "shape": shape,
        "keys": keys,
        "validation": validation,
        "test": test,
        "eval_on_start": draw(st.booleans()),
        "eval_delay": draw(st.sampled_from([0, 1, 2, 5])),
        "eval_steps": draw(st.sampled_from([1, 2, 3])),
    }


def evaluation_steps(setup: dict) -> list[int]:
    """The steps at which the Trainer evaluates in a 2-step epoch (DefaultFlowCallback): eval_on_start at 0; "epoch"
    at the epoch's end (step 2, epoch 1.0) if eval_delay <= 1; "steps" at each multiple of eval_steps and at the last
    step, those at or after eval_delay."""
    steps = [0] if setup["eval_on_start"] else []
    if setup["strategy"] == "epoch" and setup["eval_delay"] <= 1:
        steps.append(2)
    if setup["strategy"] == "steps":
        steps += [t for t in (1, 2) if (t % setup["eval_steps"] == 0 or t == 2) and t >= setup["eval_delay"]]
    return steps


def refusal_words(setup: dict) -> str | None:
    """What the start's one line must say, or None: the Trainer records a validation split."""
    if not evaluation_steps(setup):
        return "eval_strategy is 'no'" if setup["strategy"] == "no" else "eval_delay="
    if setup["shape"] == "none":
        return "no eval_dataset"
    if setup["shape"] == "dict" and not all(isinstance(key, str) for key in setup["keys"]):
        return "eval_dataset's keys must be text"  # the Trainer looks a split up by its name: 1 is not one
    if setup["shape"] == "dict" and setup["validation"] not in setup["keys"]:
        return "eval_dataset's keys are"
    return None


def eval_dataset(setup: dict):
    if setup["shape"] == "none":
        return None
    if setup["shape"] == "single":
        return VALIDATION
    by_name = {setup["validation"]: VALIDATION, setup["test"]: TEST}
    return {key: by_name.get(key, TEST) for key in setup["keys"]}


@settings(FUZZ, max_examples=25)
@given(setup=evaluation_setups())
@each_case_within(CASE_SECONDS)
def test_a_trainer_that_would_record_nothing_is_refused_in_one_line_when_training_starts(setup, template, tmp_path):
    case = fresh_case(template, tmp_path)
    callback = PeftvizCallback(runs_dir=case / "runs", validation=setup["validation"], test=setup["test"])
    trainer = tiny_trainer(
        case / "out",
        [callback],
        eval_dataset(setup),
        eval_strategy=setup["strategy"],
        eval_delay=setup["eval_delay"],
        eval_steps=setup["eval_steps"],
        eval_on_start=setup["eval_on_start"],
        **QUIET,
    )
    words = refusal_words(setup)
    event(f"refused: {words}" if words else "recorded")
    if words:
        assert words in train_refused_at_start(trainer, case / "runs", ConfigError)
        return
    trainer.train()
    [run] = new_runs(case / "runs")
    steps = evaluation_steps(setup)
    assert (run.status, run.config.epochs) == ("complete", len(steps))  # each planned point recorded, no more
    assert [line["step"] for line in run.metrics] == steps
    has_test = setup["shape"] == "dict" and setup["test"] in setup["keys"]
    assert ("test" in run.summary) == has_test
    probs, labels = run.predictions(len(steps))
    assert labels.tolist() == VALIDATION["labels"] and probs.shape == (len(VALIDATION), 3)


# ---------------------------------------------------------------------------------------------
# the callback's own arguments

TEXT = [
    "",
    " ",
    "\n",
    "a\nb",
    "tab\there",
    "nul\x00",
    "line\u2028sep",
    "\ud800",
    5,
    1.5,
    b"bytes",
    ["x"],
    {},
    "x" * 81,
    "ok",
    "Ünïcode name",
]
STORE = "the case's store"  # a runs_dir drawn as this is the case's own store: nothing is written outside it
# each argument's values a store accepts, and its hostile ones (some of which are fine too: the oracle decides)
GOOD = {
    "name": [None, "ok", "Ünïcode name"],
    "dataset": [None, "tokens"],
    "model": [None, "tiny"],
    "method": [None, "lora", "my-method"],
    "options": [None],
    "settings": [None, {}, {"limit": 60}, {"note": "warm"}],
    "runs_dir": [STORE],
    "validation": ["validation", "dev"],
    "test": ["test", "held out"],
}
HOSTILE = {
    "name": TEXT,
    "dataset": TEXT,
    "model": TEXT,
    "method": ["fine-tuning", "a b", "external:x", *TEXT],
    "options": [{}, {"r": 4}, {"r": -1}, {"bogus": 1}, [1], "r=4"],
    "settings": [{"x": [1]}, [("a", 1)], {"a b": 1}, {"learning_rate": -1.0}, {"model": "m"}, "limit=60"],
    "runs_dir": [5, "", b"runs", "a\x00b", ["runs"]],
    "validation": ["test", "held out", "", "\n", 5, None],
    "test": ["validation", "dev", "", "\n", 5, None],
}


@st.composite
def callback_arguments(draw) -> dict:
    """Up to two arguments drawn from their hostile values (or any short text, for the name), the rest good."""
    hostile = draw(st.sets(st.sampled_from(sorted(GOOD)), max_size=2))
    arguments = {name: draw(st.sampled_from(HOSTILE[name] if name in hostile else GOOD[name])) for name in GOOD}
    if "name" in hostile and draw(st.booleans()):
        arguments["name"] = draw(st.text(max_size=4))
    return arguments


def not_one_line(value) -> bool:
    return (
        not isinstance(value, str)
        or not value.strip()
        or any(unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs") for char in value)
    )


def argument_problems(arguments: dict) -> set[str]:
    """The arguments the callback must refuse when it is built (the word its line starts with)."""
    problems = {
        name
        for name in ("name", "dataset", "model", "method")
        if arguments[name] is not None and not_one_line(arguments[name])
    }
    if isinstance(arguments["name"], str) and len(arguments["name"]) > 80:
        problems.add("name")
    problems |= {
        name
        for name in ("options", "settings")
        if arguments[name] not in (None,) and not isinstance(arguments[name], dict)
    }
    if arguments["options"] and arguments["method"] is None:
        problems.add("options")
    if arguments["runs_dir"] != STORE:
        problems.add("runs_dir")
    problems |= {name for name in ("validation", "test") if not_one_line(arguments[name])}
    if arguments["validation"] == arguments["test"]:
        problems.add("validation")
    return problems


def plainly_good(arguments: dict) -> bool:
    """Arguments every store accepts (each one of its GOOD values, or LoRA's r=4 for lora): the run must be recorded."""
    lora_r = arguments["method"] == "lora" and arguments["options"] == {"r": 4}
    return all(arguments[name] in GOOD[name] or (name == "options" and lora_r) for name in GOOD)


@settings(FUZZ, max_examples=30)
@given(arguments=callback_arguments())
@each_case_within(CASE_SECONDS)
def test_hostile_callback_arguments_are_refused_in_one_line_or_recorded_as_given(arguments, template, tmp_path):
    case = fresh_case(template, tmp_path)
    given_arguments = {
        **arguments,
        "runs_dir": case / "runs" if arguments["runs_dir"] == STORE else arguments["runs_dir"],
    }
    problems = argument_problems(arguments)
    if problems:
        event("refused when built")
        with pytest.raises(ConfigError) as caught:
            PeftvizCallback(**given_arguments)
        assert assert_one_line(caught.value).split()[0] in problems
        return
    callback = PeftvizCallback(**given_arguments)
    splits = {arguments["validation"]: VALIDATION, arguments["test"]: TEST}
    trainer = tiny_trainer(case / "out", [callback], splits, eval_strategy="steps", eval_steps=1, max_steps=1, **QUIET)
    try:
        trainer.train()
    except PeftvizError as err:  # what the store refuses of their values (a method's options, a setting)
        event("refused when training starts")
        assert not plainly_good(arguments), str(err)
        assert_one_line(err)
        assert trainer.state.global_step == 0 and snapshot(case / "runs") == snapshot(template)
        return
    event("recorded")
    [run] = new_runs(case / "runs")
    method = arguments["method"] or "lora"  # the tiny BERT carries a peft LoRA
    assert run.status == "complete" and len(run.metrics) == 1 and "test" in run.summary
    assert run.label == (arguments["name"] or method)
    assert run.config.method in (method, f"external:{method}")
    assert (run.config.dataset, run.config.model) == (
        arguments["dataset"] or "unnamed",
        arguments["model"] or MODEL_NAME,
    )
    extra = {key: value for key, value in (arguments["settings"] or {}).items() if key != "limit"}
    assert extra.items() <= run.recorded["settings"].items()


BASE = {name: values[0] for name, values in GOOD.items()}  # every argument good: name, dataset, ... None
# each hostile value that must be refused on its own, among good arguments: every refusal, not only those drawn
ALONE = [(name, value) for name in GOOD for value in HOSTILE[name] if argument_problems({**BASE, name: value})]


@pytest.mark.parametrize(("argument", "value"), ALONE, ids=[f"{name}={value!r}" for name, value in ALONE])
def test_each_of_the_hostile_arguments_alone_is_refused_in_one_line_when_built(argument, value, tmp_path):
    arguments = {**BASE, argument: value}
    with pytest.raises(ConfigError) as caught:
        PeftvizCallback(**{**arguments, "runs_dir": value if argument == "runs_dir" else tmp_path / "runs"})
    assert assert_one_line(caught.value).split()[0] in argument_problems(arguments)
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------
# labels outside the model's classes, at an evaluation


def relabelled(split: Dataset, labels: list, as_float: bool) -> Dataset:
    values = [float(label) for label in labels] if as_float else labels
    return split.remove_columns("labels").add_column("labels", values)


@settings(FUZZ, max_examples=20)
@given(
    labels=st.lists(st.sampled_from([0, 1, 2]), min_size=6, max_size=6)
    | st.lists(st.integers(-200, 200) | st.sampled_from([0, 1, 2, -100, 3, -1]), min_size=6, max_size=6),
    which=st.sampled_from(["validation", "test"]),
    test_first=st.booleans(),
    as_float=st.booleans(),
    at_start=st.booleans(),
)
@each_case_within(CASE_SECONDS)
def test_labels_outside_the_head_fail_the_run_with_one_line(
    labels, which, test_first, as_float, at_start, template, tmp_path
):
    case = fresh_case(template, tmp_path)
    splits = {"validation": VALIDATION, "test": token_split(6, seed=3)}
    splits[which] = relabelled(splits[which], labels, as_float)
    if test_first:
        splits = {"test": splits["test"], "validation": splits["validation"]}
    trainer = tiny_trainer(
        case / "out",
        [PeftvizCallback(runs_dir=case / "runs")],
        splits,
        eval_strategy="steps",
        eval_steps=1,
        max_steps=1,
        eval_on_start=at_start,
        **QUIET,
    )
    in_head = not as_float and all(0 <= label < 3 for label in labels)
    event("in the head" if in_head else "outside")
    if in_head:
        trainer.train()
        [run] = new_runs(case / "runs")
        assert run.status == "complete" and run.predictions(1)[1].tolist() == splits["validation"]["labels"]
        return
    with pytest.raises(RecordError) as caught:
        trainer.train()
    line = assert_one_line(caught.value)
    expected = "labels must be a 1-D array of class ids (integers)" if as_float else "labels must be class ids 0..2"
    assert expected in line and f"evaluation at step {0 if at_start else 1}" in line
    [run] = new_runs(case / "runs")
    assert (run.status, run.error) == ("failed", line)
    # the validation split evaluated before a bad test split is recorded; nothing after the refusal
    assert len(run.metrics) == int(which == "test" and not test_first)


# ---------------------------------------------------------------------------------------------
# the model's classes: config.id2label

NAMES = ["a", "b", "c", "a\nb", "", " ", 3]
IDS = [0, 1, 2, 3, -1, "0", "1", "x", 1.5]


def numbered(names: list, as_text: bool) -> dict:
    """id2label as a config holds it: the class ids 0..n-1 (or their text, as JSON gives them) to names."""
    return {str(class_id) if as_text else class_id: name for class_id, name in enumerate(names)}


@st.composite
def id2labels(draw):
    """2 to 4 classes well named (the model's head has 3); any names numbered 0..n-1; any keys; not a dict."""
    kind = draw(st.sampled_from(["classes", "numbered", "any keys", "not a dict"]))
    if kind == "classes":
        names = ["a", "b", 3, "d"][: draw(st.sampled_from([3, 2, 4]))]
        return numbered(draw(st.permutations(names)), draw(st.booleans()))
    if kind == "numbered":
        return numbered(draw(st.lists(st.sampled_from(NAMES), max_size=4)), draw(st.booleans()))
    if kind == "any keys":
        return draw(st.dictionaries(st.sampled_from(IDS), st.sampled_from(NAMES), max_size=4))
    return draw(st.sampled_from([None, [1, 2], "ab"]))


def id2label_problem(id2label) -> bool:
    """Whether the callback must refuse the model: keys are not the class ids 0..n-1 (ints or their text), fewer
    than two names, names repeated, blank or of more than one line."""
    if not isinstance(id2label, dict):
        return True
    try:
        by_id = {int(key): str(name) for key, name in id2label.items()}
    except ValueError:
        return True
    names = [by_id.get(i) for i in range(len(by_id))]
    return len(names) < 2 or None in names or len(set(names)) < len(names) or any(map(not_one_line, names))


@settings(FUZZ, max_examples=20)
@given(id2label=id2labels())
@each_case_within(CASE_SECONDS)
def test_a_model_whose_id2label_is_not_its_classes_is_refused_in_one_line(id2label, template, tmp_path):
    case = fresh_case(template, tmp_path)
    model = tiny_bert()
    model.config.id2label = id2label
    trainer = tiny_trainer(
        case / "out",
        [PeftvizCallback(runs_dir=case / "runs")],
        VALIDATION,
        model=model,
        eval_strategy="steps",
        eval_steps=1,
        max_steps=1,
        **QUIET,
    )
    if id2label_problem(id2label):
        event("refused")
        assert "config.id2label" in train_refused_at_start(trainer, case / "runs", RecordError)
        return
    try:  # 3 classes train as recorded; other counts fail at the evaluation (labels or logits' width)
        trainer.train()
    except RecordError as err:
        event("failed at the evaluation")
        [run] = new_runs(case / "runs")
        assert len(id2label) != 3 and (run.status, run.error) == ("failed", assert_one_line(err))
        return
    event("recorded")
    [run] = new_runs(case / "runs")
    assert run.status == "complete" and run.label_names == [str(id2label[key]) for key in sorted(id2label, key=int)]


# ---------------------------------------------------------------------------------------------
# other ways a Trainer run goes: outputs as tuples, metrics named like the Trainer's, predict() within training,
# a resumed run, an evaluation that never comes


def stored_against_predict(trainer, run, epoch: int) -> float:
    out = trainer.predict(VALIDATION)
    probs, labels = run.predictions(epoch)
    assert labels.tolist() == out.label_ids.tolist()
    return float(np.abs(probs - torch.from_numpy(out.predictions).float().softmax(-1).numpy()).max())


def test_a_model_that_returns_tuples_is_recorded_from_its_logits_and_evaluations_outside_train_are_not(tmp_path):
    model = tiny_bert(lora=False)
    model.config.return_dict = False  # (loss, logits) with labels, (logits,) without
    trainer = tiny_trainer(
        tmp_path / "out", [PeftvizCallback(runs_dir=tmp_path / "runs")], VALIDATION, model=model, **QUIET
    )
    trainer.evaluate()  # before train(): no run yet, nothing recorded
    trainer.train()
    trainer.evaluate()  # after it: the run is closed
    [run] = list_runs(tmp_path / "runs")
    assert (run.status, len(run.metrics)) == ("complete", 1) and stored_against_predict(trainer, run, 1) < 1e-6


def test_a_metric_named_like_the_trainers_runtime_leaves_the_split_as_it_is(tmp_path):
    def compute_metrics(prediction):
        return {"inference_runtime": 1.0, "accuracy": 0.5}  # eval_inference_runtime comes before eval_runtime

    callback = PeftvizCallback(runs_dir=tmp_path / "runs")
    trainer = tiny_trainer(tmp_path / "out", [callback], VALIDATION, **QUIET)
    trainer.compute_metrics = compute_metrics
    trainer.train()
    [run] = list_runs(tmp_path / "runs")
    assert (run.status, len(run.metrics)) == ("complete", 1)


class ScoresNotLogits(torch.nn.Module):
    """A classifier whose output names its logits otherwise: {"loss", "scores"}."""

    def __init__(self):
        super().__init__()
        self.inner = tiny_bert(lora=False)
        self.config = self.inner.config

    def forward(self, input_ids, attention_mask=None, labels=None):
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        return {"loss": out.loss, "scores": out.logits}


@pytest.mark.parametrize(
    ("model", "split", "words"),
    [
        (tiny_bert, token_split(6, seed=2, labelled=False), "the Trainer evaluated without labels"),
        (ScoresNotLogits, VALIDATION, "the model's output at evaluation has no logits"),
    ],
    ids=["no labels", "no logits"],
)
def test_an_evaluation_with_nothing_to_record_fails_the_run_with_one_line(model, split, words, tmp_path):
    trainer = tiny_trainer(
        tmp_path / "out",
        [PeftvizCallback(runs_dir=tmp_path / "runs")],
        split,
        model=model(),
        remove_unused_columns=False,
        **QUIET,
    )
    with pytest.raises(RecordError) as caught:
        trainer.train()
    line = assert_one_line(caught.value)
    [run] = list_runs(tmp_path / "runs")
    assert words in line and (run.status, run.error, run.metrics) == ("failed", line, [])


class PredictAtEpochEnd(TrainerCallback):
    """Another callback that calls trainer.predict() on another split at each epoch's end, before its evaluation."""

    trainer = None

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer.predict(TEST)


def test_a_predict_within_training_is_not_taken_for_the_evaluation(tmp_path):
    predicting = PredictAtEpochEnd()
    trainer = tiny_trainer(
        tmp_path / "out", [PeftvizCallback(runs_dir=tmp_path / "runs"), predicting], VALIDATION, **QUIET
    )
    predicting.trainer = trainer
    trainer.train()
    [run] = list_runs(tmp_path / "runs")
    assert run.status == "complete" and stored_against_predict(trainer, run, 1) < 1e-6


@pytest.mark.parametrize("strategy", [{"eval_strategy": "epoch"}, {"eval_strategy": "steps", "eval_steps": 2}])
def test_a_resumed_run_plans_the_evaluations_it_runs(strategy, tmp_path):
    """2 of 6 steps done (checkpoint-2): the resumed train() evaluates at steps 4 and 6, and plans those two."""
    saving = {"save_strategy": "steps", "save_steps": 2, "max_steps": 4}
    tiny_trainer(tmp_path / "out", [], VALIDATION, **strategy, **saving, **QUIET).train()
    callback = PeftvizCallback(runs_dir=tmp_path / "runs")
    resumed = tiny_trainer(tmp_path / "out", [callback], VALIDATION, **strategy, **{**QUIET, "num_train_epochs": 3})
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    [run] = list_runs(tmp_path / "runs")
    assert (run.status, run.config.epochs, [line["step"] for line in run.metrics]) == ("complete", 2, [4, 6])


def test_a_train_that_evaluates_nothing_it_reads_ends_failed_and_says_so(tmp_path):
    """Epoch 0.5 ends the run (max_steps=1 of a 2-step epoch) before eval_delay=0.75: the Trainer never evaluates,
    which the start cannot tell from the arguments alone."""
    callback = PeftvizCallback(runs_dir=tmp_path / "runs")
    trainer = tiny_trainer(tmp_path / "out", [callback], VALIDATION, max_steps=1, eval_delay=0.75, **QUIET)
    with pytest.warns(UserWarning, match="training ended with no evaluation recorded") as said:
        trainer.train()
    [run] = list_runs(tmp_path / "runs")
    line = next(str(warning.message) for warning in said if "training ended" in str(warning.message))
    assert (run.status, run.error, run.metrics) == ("failed", line, []) and "\n" not in line
    assert "the Trainer evaluated nothing" in line and callback.run.status == "failed"
