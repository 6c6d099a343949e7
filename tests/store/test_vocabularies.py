"""The store's vocabularies (engines, import kinds, statuses) are defined once, in `store.schema`, and every
table keyed by one of them (the import loaders, the sources' marker files, the CLI's --engine, the app's
engine labels) holds exactly its words."""

import argparse
import ast
from pathlib import Path

import pytest

from peftviz.store import schema
from peftviz.store.schema import ENGINES, FINISHED, IMPORT_KINDS, STATUSES

ROOT = Path(__file__).resolve().parents[2]
VOCABULARIES = {"ENGINES": ENGINES, "IMPORT_KINDS": IMPORT_KINDS, "STATUSES": STATUSES, "FINISHED": FINISHED}


def literal_words(node: ast.AST) -> list[set[str]]:
    """The sets of words a literal spells out: a tuple, list or set of strings, or a dict's string values."""
    spelled = [node.elts] if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
    spelled += [node.values] if isinstance(node, ast.Dict) else []
    return [
        {item.value for item in items}
        for items in spelled
        if items and all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in items)
    ]


def vocabularies_spelled_out(root: Path) -> list[str]:
    """`file:line NAME` for each literal in peftviz/, pages/ and app.py that spells out a whole vocabulary."""
    found = []
    for path in sorted([*root.glob("peftviz/**/*.py"), *root.glob("pages/*.py"), root / "app.py"]):
        for node in ast.walk(ast.parse(path.read_text())):
            for words in literal_words(node):
                found += [
                    f"{path.relative_to(root)}:{node.lineno} {name}"
                    for name, vocabulary in VOCABULARIES.items()
                    if words == set(vocabulary)
                ]
    return found


def test_each_vocabulary_is_spelled_out_once_in_the_schema():
    """No module but the schema lists a vocabulary's words (the schema may build one from named words)."""
    found = vocabularies_spelled_out(ROOT)
    names = [entry.split()[1] for entry in found]
    assert len(names) == len(set(names)), found
    assert all(entry.startswith("peftviz/store/schema.py:") for entry in found), found


def test_the_vocabularies_hold_distinct_words():
    for name, vocabulary in VOCABULARIES.items():
        assert isinstance(vocabulary, tuple) and len(set(vocabulary)) == len(vocabulary) >= 2, name
    assert set(FINISHED) < set(STATUSES)
    assert len(STATUSES) == 5 and len(ENGINES) == 2 and len(IMPORT_KINDS) == 3


def test_the_import_loaders_and_the_sources_kinds_are_the_import_kinds():
    from peftviz.exchange import sources
    from peftviz.exchange.imports import LOADERS

    assert tuple(LOADERS) == IMPORT_KINDS
    assert sorted(sources.KINDS.values()) == sorted(IMPORT_KINDS)  # each kind marked by one file


def engine_choices(parser: argparse.ArgumentParser) -> list[tuple]:
    """The choices of every --engine flag of the parser and its subcommands."""
    found = []
    for action in parser._actions:
        if "--engine" in action.option_strings:
            found.append(tuple(action.choices))
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                found += engine_choices(subparser)
    return found


def test_the_cli_and_the_app_offer_the_engines_the_store_accepts():
    from peftviz.app.jobpanel import ENGINE_LABELS
    from peftviz.cli import build_parser

    offered = engine_choices(build_parser())
    assert offered and all(choices == ENGINES for choices in offered), offered
    assert tuple(ENGINE_LABELS) == ENGINES


@pytest.mark.parametrize("engine", [*ENGINES, "slurm"])
def test_an_attempt_is_read_only_with_an_engine_of_the_vocabulary(engine):
    attempt = {"engine": engine, "node": "n1", "started": "2026-11-26T10:00:00", "from_epoch": 0}
    if engine in ENGINES:
        schema.check_record({"label_names": ["a", "b"], "attempts": [attempt]})
        return
    with pytest.raises(schema.Corrupt) as caught:
        schema.check_record({"label_names": ["a", "b"], "attempts": [attempt]})
    assert str(caught.value) == 'config.json: attempts[1].engine must be one of local, ray, not "slurm"'


@pytest.mark.parametrize("kind", [*IMPORT_KINDS, "onnx"])
def test_an_imported_run_is_read_only_with_a_kind_of_the_vocabulary(kind):
    imported = {"kind": kind, "source": "x", "labels": "by name", "revision": None, "files": {}}
    if kind in IMPORT_KINDS:
        schema.check_record({"label_names": ["a", "b"], "imported": imported})
        return
    with pytest.raises(schema.Corrupt) as caught:
        schema.check_record({"label_names": ["a", "b"], "imported": imported})
    assert str(caught.value) == (
        'config.json: imported.kind must be one of peft-adapter, hf-classifier, peftviz, not "onnx"'
    )


@pytest.mark.parametrize("status", [*STATUSES, "done"])
def test_a_summary_says_only_a_finished_status(status):
    if status in FINISHED:
        assert schema.check_summary({"status": status})["status"] == status
        return
    with pytest.raises(schema.Corrupt) as caught:
        schema.check_summary({"status": status})
    assert str(caught.value) == f'summary.json: status must be "complete" or "failed", not "{status}"'
