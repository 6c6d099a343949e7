"""A shared server names nothing of the server: every text field of every page, given server paths that
exist and paths that do not, answers alike, and queues nothing.

The pages are opened in AppTest with PEFTVIZ_SHARED=1 on a store of one tiny-attention run (so that its
files are among the paths typed, and the Train page has a run to offer as a starting run). Each page is
explored one step deep: every option of its radios (those whose options are their values) and, on
the Train page, every method, since each
method has a form of its own. Every text field found is given each path in turn, then the page's Train
button (where it has one) is pressed. The page's answers (errors, warnings, notes, exceptions) must be
the same for every path once the typed text is replaced by a placeholder; no job may be queued.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.methods import METHODS
from peftviz.paths import minilm_path
from tests.support.job_helpers import fake_queue

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "pages").glob("*.py"))
TRAIN_PAGE = "pages/1_Train.py"
TYPED = "<typed>"


@pytest.fixture(scope="module")
def one_run_store(tmp_path_factory):
    """A store with one complete one-head run of the method that can start from another run."""
    from peftviz.run_config import preset_config
    from peftviz.training.trainer import train

    linking = next(name for name in METHODS if METHODS[name].starts_from)
    store = tmp_path_factory.mktemp("shared_paths") / "runs"
    run = train(preset_config("smoke", linking, epochs=1), store)
    return store, run


def server_paths(store: Path, run) -> list[tuple[str, str]]:
    """(a path that exists on the server, a path of the same kind that does not)."""
    missing = f"peftviz-no-such-{uuid.uuid4().hex[:8]}"
    return [
        ("/etc/passwd", "/etc/does-not-exist.safetensors"),
        ("/tmp", f"/tmp/{missing}"),
        (str(store), str(store.parent / missing)),
        (str(run.params_path), str(run.path / f"{missing}.safetensors")),
        (str(run.path / "config.json"), str(store / missing / "config.json")),
        (str(minilm_path()), str(minilm_path().parent / missing)),  # a model folder the server has
    ]


def peft_word_options() -> set[str]:
    """The string options of the peft tuners' forms (target_modules, peft's bias modes, ...)."""
    from peftviz.methods.peft_tuner import PeftTunerConfig

    classes = [cls.config_class for cls in METHODS.values() if issubclass(cls.config_class, PeftTunerConfig)]
    return {name for config in classes for name, kind in config.types().items() if kind is str}


def views(page: str) -> list[tuple[str, str, str]]:
    """(widget kind, label, value) of each view one step from the page's default: ("", "", "") is the default."""
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    found = [("", "", "")]
    for radio in at.radio:
        if radio.label != "Charts download as" and plain(radio):  # not the sidebar's export format
            found += [("radio", radio.label, option) for option in radio.options[1:]]
    if page == TRAIN_PAGE:
        found += [("selectbox", "Method", method) for method in METHODS]
    return found


def plain(radio) -> bool:
    """A radio whose options are the values it returns: AppTest can set it by the option's text. (Those
    with a format_func choose among an analysis's fixed variants, which show no text field.)"""
    try:
        return all(radio.format_func(option) == option for option in radio.options)
    except Exception:  # noqa: BLE001  (a format_func of raw values only)
        return False


def open_view(page: str, view: tuple[str, str, str]) -> AppTest:
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    kind, label, value = view
    if kind:
        next(widget for widget in at.get(kind) if widget.label == label).set_value(value).run()
    return at


def text_fields(at: AppTest) -> list[tuple[str, str]]:
    """(kind, label) of every free-text field on the page."""
    return [("text_input", field.label) for field in at.text_input] + [
        ("text_area", field.label) for field in at.text_area
    ]


def answers(at: AppTest, typed: str) -> list[str]:
    """What the page says back: errors, warnings, notes and exceptions, the typed text replaced."""
    said = [f"{kind}: {element.value}" for kind in ("error", "warning", "info", "success") for element in at.get(kind)]
    said += [f"exception: {element.message}" for element in at.exception]
    return [text.replace(typed, TYPED) for text in said]


def type_and_press(at: AppTest, field: tuple[str, str], value: str) -> list[str]:
    kind, label = field
    next(widget for widget in at.get(kind) if widget.label == label).set_value(value).run()
    train = [button for button in at.button if button.label == "Train"]
    if train:
        train[0].click().run()
    return answers(at, value)


@pytest.mark.slow
def test_every_text_field_of_every_page_answers_alike_whether_a_server_path_exists(one_run_store, monkeypatch):
    store, run = one_run_store
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    queue = fake_queue(monkeypatch, visitor=None)
    pairs = server_paths(store, run)
    assert all(Path(there).exists() and not Path(gone).exists() for there, gone in pairs)
    tried = {}
    for page in PAGES:
        for view in views(page):
            at = open_view(page, view)
            for field in text_fields(at):
                if (page, field) in tried:
                    continue
                said = {value: type_and_press(at, field, value) for pair in pairs for value in pair}
                tried[(page, field)] = said
                first = said[pairs[0][0]]
                for value, answer in said.items():
                    assert answer == first, f"{page} {field} {view}: {value!r} -> {answer}, not {first}"
                assert not any(text.startswith("exception") for text in first), first
    assert queue.jobs == [], [job.configs[0].method_options for job in queue.jobs if job.configs]
    labels = {field[1] for page, field in tried if page == TRAIN_PAGE}
    # the one free-text field of the Train page in shared mode, besides the peft tuners' word options (module
    # names, modes), which take no path: each refused in one line, alike whether it exists (checked above)
    assert "Model" in labels and labels - {"Model"} <= peft_word_options(), labels
    assert any(page != TRAIN_PAGE for page, _ in tried)  # the Attention page's pasted text, at least


def test_a_shared_server_offers_no_local_path_and_a_single_user_one_does(one_run_store, monkeypatch):
    store, _ = one_run_store
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    shared = AppTest.from_file(str(ROOT / TRAIN_PAGE), default_timeout=120).run()
    assert next(radio for radio in shared.radio if radio.label == "Data").options == ["built-in", "upload a file"]
    monkeypatch.delenv("PEFTVIZ_SHARED")
    single = AppTest.from_file(str(ROOT / TRAIN_PAGE), default_timeout=120).run()
    data = next(radio for radio in single.radio if radio.label == "Data")
    assert data.options == ["built-in or hub name", "upload a file", "local path"]


def test_the_starting_run_is_chosen_among_the_stores_runs_and_queued_by_its_files(one_run_store, monkeypatch):
    """The option naming another run is a select box of the store's runs that fit: its value is the run's
    parameters, the path the job opens, never a typed one."""
    store, run = one_run_store
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    queue = fake_queue(monkeypatch, visitor=None)
    at = AppTest.from_file(str(ROOT / TRAIN_PAGE), default_timeout=120).run()
    next(box for box in at.selectbox if box.label == "Preset").set_value("smoke").run()
    next(box for box in at.selectbox if box.label == "Method").set_value(run.config.method).run()
    link = run.method_class.start_option()
    box = next(box for box in at.selectbox if box.label == "Start from run")
    assert box.options[0] == "none" and len(box.options) == 2 and "seed 0" in box.options[1]
    box.set_value(str(run.params_path)).run()
    next(number for number in at.number_input if number.label == "n_heads").set_value(4).run()
    next(button for button in at.button if button.label == "Train").click().run()
    assert not at.error and not at.exception
    (job,) = queue.jobs
    assert job.configs[0].method_options[link] == str(run.params_path)
    assert job.configs[0].method_options["n_heads"] == 4
