"""What the app's pages share: cached access to the run store and models, and page furniture.

Two conventions every page follows:
- anything computed from a run goes through `per_run(compute, run, *args)`: cached with
  `st.cache_resource`, keyed by the run's signature (which changes when the run finishes an epoch or
  its parameters change), so a changed run is picked up on the next rerun;
- a page catches `PeftvizError` (bad settings, models, data or run folders) and shows it with
  `show_error`: one line, no traceback.
- what a page draws from those (figures, tables) goes through `shared(build, *args)`: built once per
  server for the same arguments, so the next reader's session draws it without building it again.
Pages stay short: read widgets, call these and `peftviz.analysis`, draw `peftviz.figures`.
"""

from __future__ import annotations

import gc
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import streamlit as st

from peftviz.analysis.run_labels import run_labels
from peftviz.figures.export import IMAGE_FORMATS, figure_table, file_stem, toolbar_config
from peftviz.paths import store_dir
from peftviz.store.runs import Group, Run, group_runs, list_runs, refreshed, run_signature, store_signature

__all__ = [
    "chart",
    "choose_units",
    "document_attention",
    "lambda_rows",
    "not_applicable",
    "options_form",
    "page",
    "per_run",
    "pick_run",
    "recorded_left_out",
    "report_note",
    "runs",
    "shared",
    "show_error",
    "show_left_out",
    "side_by_side",
    "trained_model",
]

# Streamlit collects garbage over the whole heap after every script run (`runner.postScriptGC`), a
# fragment's too: with torch, transformers, pandas and plotly loaded that is ~500,000 objects, 0.25 s
# on one core, with the interpreter lock held, so every other reader's page waits. The libraries'
# objects live as long as the server: frozen here, once, no collection walks them again (a
# collection then takes ~0.02 s). What is made later (models, figures, sessions) is collected as before.
gc.collect()
gc.freeze()

IMAGE_FORMAT_KEY = "chart_image_format"
# KaTeX ends a stacked expression with a 2-px strut that hangs out of its box (`.vlist-s`, margin
# -2px): in a display equation, which scrolls sideways when too wide, that made a scroll bar for
# nothing. The padding holds the strut.
PAGE_CSS = "<style>.katex-display { padding-right: 2px; }</style>"


def style(css: str = PAGE_CSS) -> None:
    """Add CSS to the page (no visible element)."""
    st.html(css)


def leave_folder_navigation() -> None:
    """Send the run through app.py's `st.navigation` if Streamlit ran this page file directly.

    While `pages/` sits beside app.py, Streamlit runs a server's scripts in its older mode until
    some run goes through app.py's `st.navigation`: a first visitor's link to /Train ran the page
    file itself, under a menu built from the file names ("app", "Tiny attention heads", Tour
    last), and the whole server kept it until someone opened "/". Every page calls this first.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:  # what app.py's st.navigation sets, had it run
        PagesManager.uses_pages_directory = False
        st.rerun()  # the same URL again, now resolved by app.py's pages


def page(title: str, explanation: str) -> None:
    """Title and the two or three sentences that say what the page shows; the charts' export format."""
    leave_folder_navigation()
    st.set_page_config(page_title=f"peftviz · {title}", layout="wide")
    style()
    st.sidebar.radio(
        "Charts download as",
        IMAGE_FORMATS,
        format_func=str.upper,
        horizontal=True,
        key=IMAGE_FORMAT_KEY,
        help="The camera button in a chart's toolbar saves the chart in this format; the CSV button under it "
        "saves the numbers it draws.",
    )
    st.title(title)
    st.markdown(explanation)


def chart(fig, key: str, where=st, data=None) -> None:
    """Draw a plotly figure with its toolbar set to save SVG or PNG, and a CSV of its numbers below it:
    `data` when given (a DataFrame richer than what is drawn, e.g. per-bin tables), else the traces.

    The figure is only read (it may be a `shared` one that other sessions draw too). The CSV is written
    when the button is pressed, not with every page: few readers download, every reader opens pages."""
    name = file_stem(f"{(fig.layout.title.text or '').split('<br>')[0]} {key}")  # the title's first line, then the key
    where.plotly_chart(fig, key=key, config=toolbar_config(name, st.session_state.get(IMAGE_FORMAT_KEY, "svg")))
    where.download_button(
        "CSV",
        lambda: (figure_table(fig) if data is None else data).to_csv(index=False),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"{key}-csv",
        on_click="ignore",
        icon=":material/download:",
        help="the numbers this chart draws",
    )


@st.cache_resource(show_spinner=False, max_entries=4)
def _runs(root: str, signature: tuple) -> list[Run]:
    return list_runs(Path(root))


def runs(usable_only: bool = False) -> list[Run]:
    """The store's runs (cached until the store changes). usable_only: skip corrupt and epoch-less runs."""
    root = store_dir()
    found = [refreshed(run) for run in _runs(str(root), store_signature(root))]  # a killed writer: incomplete
    if usable_only:
        found = [run for run in found if run.status != "corrupt" and run.metrics]
    return found


# cache_resource, not cache_data: results are shared, never pickled. The run or group itself is not
# hashed (leading underscore): its members' folders and signatures stand for it.
@st.cache_resource(show_spinner=False, max_entries=1024)
def _light(compute_key: str, signature: tuple, args: tuple, _compute: Callable, _subject):
    return _compute(_subject, *args)


# models (~90 MB for MiniLM) and recorded attention (up to ~160 MB each)
@st.cache_resource(show_spinner=False, max_entries=6)
def _heavy(compute_key: str, signature: tuple, args: tuple, _compute: Callable, _subject):
    return _compute(_subject, *args)


def _run_token(run: Run) -> tuple:
    """What stands for a run in a cache key: its folder and its files' signature (`per_run`, `shared`)."""
    return str(run.path), run_signature(run.path)


def _group_token(group: Group) -> tuple:
    """A group's runs and its repeats (which its row names): a repeat trained or removed changes the key."""
    return group.key, tuple(_run_token(run) for run in group.runs + group.repeats)


def stepped(steps: list, text: Callable[[int, object], str], work: Callable[[object], object]) -> None:
    """work(step) for every step under a progress bar, `text(i, step)` its line while step i runs; the bar is gone
    when they are done. What a page runs before it builds its tables: models, estimates (each `per_run`-cached)."""
    bar = st.progress(0.0)
    for done, step in enumerate(steps):
        bar.progress(done / len(steps), text=text(done, step))
        work(step)
    bar.empty()


def per_run(compute: Callable, subject: Run | Group, *args, spinner: str | None = None, heavy: bool = False):
    """compute(subject, *args), computed once and kept until a file of the run (or of a group's runs)
    changes; args must be hashable. The one cache of the pages: models, estimates, λ(C), heads' weights.

    heavy: the result is large (a model, recorded attention), so few are kept.
    """
    runs = subject.runs + subject.repeats if isinstance(subject, Group) else [subject]
    signature = tuple(map(_run_token, runs))
    key = f"{compute.__code__.co_filename}:{compute.__qualname__}"
    cached = _heavy if heavy else _light
    if spinner is None:
        return cached(key, signature, args, compute, subject)
    with st.spinner(spinner):
        return cached(key, signature, args, compute, subject)


# Figures and tables as pages draw them, shared by every session of the server. A few per page and
# setting of its widgets (the Calibration page's largest figure holds ~130 kB of JSON): at most
# SHARED_ENTRIES are kept, the least recently used dropped first, whatever the number of readers.
SHARED_ENTRIES = 96


@st.cache_resource(show_spinner=False, max_entries=SHARED_ENTRIES, hash_funcs={Run: _run_token, Group: _group_token})
def _shared(build_key: str, args: tuple, kwargs: dict, _build: Callable):
    return _build(*args, **kwargs)


def shared(build: Callable, *args, **kwargs):
    """build(*args, **kwargs), built once per server and handed to every session that asks with equal
    arguments: what one reader's page built, the next reader's draws without building it again.

    The arguments are the key: hashed by content (keep them small: widget values, names, small tables;
    Streamlit hashes a numpy array of 100,000 values or more by a sample of it), except that a Run or
    Group stands for its runs' files' signatures, as in `per_run`, so a run that finishes an epoch is
    drawn anew. `build` must depend on nothing else (it may read its runs through `per_run`), show
    nothing on the page, and its result must never be changed by a caller: every session holds the
    same object (`chart` only reads a figure). An error is raised to the caller and not kept.
    """
    code = getattr(build, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else getattr(build, "__module__", "")
    return _shared(f"{where}:{getattr(build, '__qualname__', repr(build))}", args, kwargs, build)


def trained_model(run: Run):
    """(model, tokenizer) of a run, rebuilt from its parameters once and kept."""
    from peftviz.training.inference import load_trained  # here: pages without a model never import torch

    return per_run(load_trained, run, spinner="Loading the trained model…", heavy=True)


def _document_attention(run: Run, text: str):
    from peftviz.analysis.attention import document_attention as record

    model, tokenizer = trained_model(run)
    return record(model, tokenizer, text, run.config.max_length)


def document_attention(run: Run, text: str):
    """The run's recorded attention on `text` (512 tokens on MiniLM ~80 MB; 2048 on the long MiniLM
    ~160 MB), computed once and kept: one cache for every page that shows it (Attention, Tour)."""
    return per_run(_document_attention, run, text, spinner="Reading the document's attention…", heavy=True)


def _lambda_rows(run: Run) -> list[dict]:
    from peftviz.analysis import kernel

    model, tokenizer = trained_model(run)
    return kernel.lambda_summary(kernel.run_lambda_distribution(run, model, tokenizer))


def lambda_rows(run: Run) -> list[dict]:
    """Quantile rows of the run's λ(C) on its first validation documents, computed once and kept (Kernel, Tour)."""
    from peftviz.analysis.kernel import N_LAMBDA_DOCS

    return per_run(_lambda_rows, run, spinner=f"Computing λ(C) on {N_LAMBDA_DOCS} validation documents…")


@st.cache_resource(show_spinner=False, max_entries=4)
def _run_labels(root: str, signature: tuple) -> dict[str, str]:
    return run_labels(runs())


TRAINING_MARK = " (training)"  # a run whose writer is alive, as the Calibration page's legends mark it


def _picker_labels(candidates: list[Run]) -> dict[str, str]:
    """Run name -> its picker label (`run_label`), the store's labels read once for all of them."""
    root = store_dir()
    labels = _run_labels(str(root), store_signature(root))
    return {run.name: _marked(labels.get(run.name) or run_labels([run])[run.name], run) for run in candidates}


def _marked(label: str, run: Run) -> str:
    return label + TRAINING_MARK if run.status == "training" else label


def run_label(run: Run) -> str:
    """A run named by its method, seed and what sets it apart from the store's other runs of that
    method (`run_labels.run_labels`): a picker's entries differ by what differs, not by a hash. A run
    still training says so: "(training)"."""
    return _picker_labels([run])[run.name]


def pick_run(
    label: str, candidates: list[Run], key: str, help: str | None = None, default: Run | None = None
) -> Run | None:
    """A selectbox of runs (`run_label`), opening on `default` (else the first); None (with a note on the page)
    when there are none. Entries are named by run folder, so a choice stays chosen when its run finishes
    training (and loses its "(training)"), and the run returned is the one listed now, not the one chosen then."""
    if not candidates:
        st.info("No suitable runs in the store yet: train some on the Home or Train page.")
        return None
    labels = _picker_labels(candidates)  # once, not once per entry
    listed = {run.name: run for run in candidates}
    index = candidates.index(default) if default in candidates else 0
    picked = st.selectbox(
        label,
        candidates,
        format_func=lambda run: labels.get(run.name) or run_label(run),
        index=index,
        key=key,
        help=help,
    )
    return listed.get(picked.name, picked)


def not_applicable(runs: list[Run], applies: Callable[[Run], bool], why: str) -> None:
    """One sentence naming the methods of the store a page leaves out, and why, instead of hiding them silently;
    runs recorded from other loops, which no page that rebuilds a model can show, get their own (`recorded_left_out`)."""
    left_out = sorted({run.config.method for run in runs if run.has_params and not applies(run)})
    if left_out:
        st.caption(f"Not shown: {', '.join(left_out)}. {sentence_start(why)}.")
    recorded_left_out(runs)


def recorded_left_out(runs: list[Run]) -> None:
    """One sentence naming the runs recorded from other training loops that a page rebuilding a model leaves out."""
    recorded = sorted({run.label for run in runs if run.recorded})
    if recorded:
        st.caption(
            f"Not shown: {', '.join(recorded)}, recorded from other training loops. They hold predictions, "
            "not the parameters this page rebuilds a model from; the Calibration page shows them."
        )


def sentence_start(text: str) -> str:
    """`text` with its first letter upper-cased, unless it starts with a symbol: "λ(C) …" stays "λ(C)", not "Λ(C)"."""
    first = text[:1]
    return (first.upper() if first.isascii() else first) + text[1:]


def side_by_side(explanations) -> None:
    """Quantities explained in columns, each its title, equation and text (a kernel run's λ(C) beside α)."""
    for column, explained in zip(st.columns(2), explanations):
        column.markdown(f"**{explained.title}**")
        column.latex(explained.equation)
        column.markdown(explained.text)


@dataclass(frozen=True)
class Chosen:
    """What a reader chose to compare: groups of seeds or single runs, their legend names and colours."""

    units: list[Group]
    names: dict[str, str]  # unit key -> a unique legend label
    series: dict  # legend label -> palette.unit_series (a method keeps its colour on every page)
    as_groups: bool

    @property
    def runs(self) -> list[Run]:
        return [run for unit in self.units for run in unit.runs]


def choose_units(key: str, limit: int = 6) -> Chosen:
    """The store's usable runs (a line naming the unreadable ones), the "groups of seeds / single runs"
    choice and the multiselect of them, under widget keys starting with `key`. Stops the page, saying
    why, when the store has no usable run or nothing is chosen."""
    from peftviz.analysis import calibration as analysis  # local: the app's pages import appkit first
    from peftviz.analysis import group_stats
    from peftviz.figures import palette

    for line in analysis.unusable_lines(runs()):  # unreadable, no finished epoch: one line each, naming them
        st.caption(line)
    usable = runs(usable_only=True)
    if not usable:
        st.info("No runs with a finished epoch yet: train some on the Home or Train page, then come back.")
        st.stop()
    groups = group_runs(usable)
    has_seeds = any(len(group.runs) > 1 for group in groups)
    as_groups = (
        st.radio(
            "Show",
            ["groups of seeds", "single runs"],
            index=0 if has_seeds else 1,
            horizontal=True,
            help="A group is the runs of one setting at several training seeds: its mean, an interval "
            "over the seeds, and its members.",
            key=f"{key}_show",
        )
        == "groups of seeds"
    )
    if as_groups:
        candidates = {group.key: group for group in groups}
        names = group_stats.unique_names(groups)
        default = [g.key for g in group_stats.select_units(usable)[:limit]]
    else:
        candidates = {run.name: Group(run.name, [run]) for run in usable}
        names = analysis.display_names(usable)
        default = [run.name for run in analysis.default_selection(usable, limit)]
    listed = {key: names[key] + (_seeds_training(unit) if as_groups else "") for key, unit in candidates.items()}
    chosen = st.multiselect(
        "Groups" if as_groups else "Runs",
        list(candidates),
        default=default,
        format_func=listed.get,
        key=f"{key}_units_{as_groups}",
    )
    if chosen == default and (
        line := analysis.not_by_default(list(candidates.values()), default, names, limit, single_runs=not as_groups)
    ):
        st.caption(line)
    if not chosen:
        st.info("Pick at least one.")
        st.stop()
    units = [candidates[name] for name in chosen]
    in_store = palette.store_series(usable)  # colours keyed by method over the whole store, not the selection
    series = {names[unit.key]: palette.unit_series(unit.runs, in_store) for unit in units}
    return Chosen(units, names, series, as_groups)


def _seeds_training(group: Group) -> str:
    """A group's mark in a picker while some of its runs still train ("(training: seed 2)"), as a single run's
    name says "(training)" (`analysis.calibration.display_names`); "" when none does."""
    seeds = [str(run.seed) for run in [*group.runs, *group.repeats] if run.status == "training"]
    return f" (training: seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)})" if seeds else ""


def show_error(err: Exception | str) -> None:
    """A user mistake or bad run folder (an exception or its message), in one sentence on the page: no traceback."""
    st.error(str(err).splitlines()[0] if str(err) else type(err).__name__)


def show_left_out(judging) -> None:
    """What a comparison leaves out (`analysis.calibration.judgeable`), one line per reason, naming the runs:
    runs on other data and runs not written yet as notes, each damaged run as an error."""
    for line in judging.notes():
        st.caption(line)
    for line in judging.damaged:  # one line per run, naming its file and what is wrong with it
        show_error(line)


def report_note(settings, metrics: tuple[str, ...] = ()) -> str:
    """Whether a table's intervals are those of `report` (`metrics`: asked with --metric; none, its defaults,
    and on test those of Home's groups table too), given the `group_stats.Settings` it was made with: the same
    resamples, bootstrap seed and bins give the same cells."""
    from peftviz.analysis.group_stats import Settings

    default = Settings()
    flags = "".join(f" --metric {name}" for name in metrics) + (
        "" if settings.which == "test" else f" --epoch {settings.which}"
    )
    where = f"`report{flags}`"
    if settings.which == "test" and not metrics:
        where += " and of Home's groups table (test accuracy and ECE)"
    said = {
        "n_resamples": f"{default.n_resamples:,} resamples",
        "seed": f"bootstrap seed {default.seed}",
        "n_bins": f"{default.n_bins} bins",
        "scheme": "equal-width bins",
        "level": f"{default.level:.0%} intervals",
        "group_interval": "the two-level bootstrap",
    }
    differ = [text for name, text in said.items() if getattr(settings, name) != getattr(default, name)]
    if not differ:
        return f"These are the cells of {where}, at {default.n_resamples:,} resamples."
    return f"The cells of {where} use {' and '.join(differ)}: with those, these cells are theirs."


def current_session() -> str:
    """The id of the browser session (a tab) running now; "" outside a page run."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else ""


def current_page() -> str:
    """An id of the page running now (Streamlit's page hash); "" outside a page run."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.pages_manager.current_page_script_hash if ctx is not None else ""


def _shown_choice(value) -> str:
    return "None" if value is None else str(value)


def _choice(label: str, options: list, default, help_text: str, widget_key: str):
    """A select box of `options`, at `default` where it is one of them (else the first)."""
    index = options.index(default) if default in options else 0
    _follow_default(widget_key, options[index])
    return st.selectbox(label, options, index=index, help=help_text, key=widget_key, format_func=_shown_choice)


def options_form(
    option_class,
    defaults: dict,
    key: str,
    only: tuple[str, ...] | None = None,
    labels: dict[str, str] | None = None,
    links: dict[str, list[Run]] | None = None,
) -> dict:
    """One widget per field of an Options dataclass (or the fields in `only`), with its help text:
    a select box for fields with choices, a checkbox, a number or a text box. Returns the chosen values.

    labels: a field's label on the page (default: its name); the help text then names the field as
    the CLI and config.json do. links: fields that name another run (a method's start option), each with the runs
    it may name: a select box of those runs (or none), whose value is the run's parameters' path. No
    such field is ever a text box: a visitor of a shared server must not name a server path.

    Number fields get no min_value/max_value on purpose: Streamlit's browser widget refuses a value
    outside them by marking the field and keeping the previous value, so the page would train with a
    number the user did not choose. Every value is passed on as typed, and building the Options
    refuses it with one sentence naming the setting and its range, before anything starts.

    The widgets keep their values while `key` stays the same, whatever defaults they are drawn with (the Train
    page keys its settings by preset, not method). A field the user left at its default follows a new default
    (another method's learning rate); one the user changed keeps the user's value (`_follow_default`)."""
    types, choices, labels, links = option_class.types(), option_class.choices(), labels or {}, links or {}
    hints = typing.get_type_hints(option_class)
    values = {}
    for f in fields(option_class):
        if only is not None and f.name not in only:
            continue
        default = defaults.get(f.name, f.default)
        label, help_text = _label_and_help(f.name, labels.get(f.name), option_class.help()[f.name])
        widget_key = f"{key}.{f.name}"
        if f.name in links:
            _follow_default(widget_key, default)
            values[f.name] = _run_choice(label, links[f.name], default, help_text, widget_key)
        elif f.name in choices:  # `Literal[...] | None` (peft's) offers None too, shown as "None"
            options = list(choices[f.name]) + ([None] if _takes_none(hints[f.name]) else [])
            values[f.name] = _choice(label, options, default, help_text, widget_key)
        elif types[f.name] is bool:
            _follow_default(widget_key, bool(default))
            values[f.name] = st.checkbox(label, bool(default), help=help_text, key=widget_key)
        elif types[f.name] is int:  # an optional int (e.g. limit) may be left empty: None
            _follow_default(widget_key, default)
            number = st.number_input(label, value=default, step=1, help=help_text, key=widget_key)
            values[f.name] = None if number is None else int(number)
        elif types[f.name] is float:  # an optional float (peft's `float | None`) may be left empty: None
            value = None if default is None else float(default)
            _follow_default(widget_key, value)
            values[f.name] = st.number_input(label, value=value, format="%g", help=help_text, key=widget_key)
        else:
            shown = "" if default is None else str(default)
            _follow_default(widget_key, shown)
            text = st.text_input(label, shown, help=help_text, key=widget_key)
            optional_and_empty = default is None and not text
            values[f.name] = None if optional_and_empty else text
    return values


def _follow_default(widget_key: str, default) -> None:
    """Before a keyed widget is drawn: when its default has changed since it was last drawn and it still holds
    the old one (the user never changed it), it takes the new default; a value the user chose stays. Streamlit
    itself keeps a keyed widget's value whatever default it is drawn with."""
    last_key = f"{widget_key}.last_default"  # not a widget's key: kept in the session as it is
    last = st.session_state.get(last_key, default)
    if last != default and widget_key in st.session_state and st.session_state[widget_key] == last:
        st.session_state[widget_key] = default
    st.session_state[last_key] = default


def _takes_none(hint) -> bool:
    return type(None) in typing.get_args(hint)


def _label_and_help(name: str, label: str | None, help_text: str) -> tuple[str, str]:
    """A field's label and help: a readable label names the field in its help, as the CLI spells it."""
    if label is None or label == name:
        return name, help_text
    return label, f"{help_text[0].upper()}{help_text[1:]} (`{name}`)"


def _run_choice(label: str, runs: list[Run], default, help_text: str, key: str) -> str | None:
    """A select box of the runs an option may name, or none: returns the chosen run's parameters' path."""
    paths = [str(run.params_path) for run in runs]
    names = dict(zip(paths, runs))
    # a run chosen before stays chosen when it is no longer offered (deleted, or another model chosen since),
    # so that Train says why it cannot start from it instead of training from scratch without a word
    chosen = st.session_state.get(key)
    options = [None, *paths, *([chosen] if chosen and chosen not in names else [])]
    index = options.index(default) if default in options else 0
    help_text += "; chosen among the store's runs that fit, or none"
    return st.selectbox(
        label, options, index=index, help=help_text, key=key, format_func=lambda path: _linked_run_label(path, names)
    )


def _linked_run_label(path: str | None, offered: dict[str, Run]) -> str:
    if path is None:
        return "none"
    return run_label(offered[path]) if path in offered else "a run no longer offered (gone, or of another model)"
