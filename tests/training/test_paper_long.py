"""The paper-long preset (Table 5 of the prefix-propagation paper on Longformer), several datasets in one comparison,
and Appendix B's learning-rate grids: configurations only, nothing trained or loaded."""

import pytest

from peftviz import cli
from peftviz.methods import METHODS
from peftviz.run_config import preset_config
from peftviz.store.runs import group_key
from peftviz.sweep.variants import comparison_configs

PAPER_DATASETS = ("arxiv", "hyperpartisan", "20newsgroups")
# the paper's long-document table (Table 2) and its Appendix B searches, typed from the paper
TABLE_METHODS = ("fine-tuning", "prefix-tuning", "prefix-propagation", "kernel-prefix-propagation")
PREFIX_SEARCH = (5e-4, 1e-3, 5e-3, 1e-2, 5e-2)
SEARCHES = {
    "fine-tuning": (3e-5, 5e-5),
    "prefix-tuning": PREFIX_SEARCH,
    "prefix-propagation": PREFIX_SEARCH,
    "kernel-prefix-propagation": PREFIX_SEARCH,
}
TABLE_5_EPOCHS = {"arxiv": 10, "hyperpartisan": 20, "20newsgroups": 10}
THE_COMMAND = "compare --preset paper-long --dataset arxiv,hyperpartisan,20newsgroups --seeds 3 --engine ray"


def configs_of(command: str) -> list:
    return cli.configs_of(cli.build_parser().parse_args(command.split()))


def test_the_table_s_command_builds_36_runs_three_seeds_of_four_methods_on_three_datasets():
    configs = configs_of(THE_COMMAND)
    assert len(configs) == 3 * 4 * 3
    assert {(c.dataset, c.method, c.seed) for c in configs} == {
        (d, m, s) for d in PAPER_DATASETS for m in TABLE_METHODS for s in range(3)
    }
    assert configs_of("compare --preset paper-long --seeds 3") == configs  # the paper's datasets by default


@pytest.mark.parametrize("dataset", PAPER_DATASETS)
def test_each_dataset_gets_table_5_s_settings(dataset):
    configs = [c for c in comparison_configs("paper-long") if c.dataset == dataset]
    assert [c.method for c in configs] == list(TABLE_METHODS)  # tiny-attention is not in the long-document table
    for config in configs:
        assert config.model == "allenai/longformer-base-4096" and config.max_length == 4096
        assert (config.effective_batch_size, config.warmup_ratio, config.schedule) == (32, 0.1, "linear")
        assert config.effective_batch_size % config.batch_size == 0 and config.batch_size == 4
        assert config.epochs == TABLE_5_EPOCHS[dataset]
    rates = {c.method: c.learning_rate for c in configs}
    assert rates["fine-tuning"] in SEARCHES["fine-tuning"]  # each method's default rate lies in its search
    assert all(rates[m] in PREFIX_SEARCH for m in TABLE_METHODS[1:])


def test_a_single_run_on_hyperpartisan_also_gets_20_epochs():
    assert preset_config("paper-long", "prefix-tuning", dataset="hyperpartisan").epochs == 20
    assert preset_config("paper-long", "prefix-tuning").epochs == 10  # the preset's own dataset, arxiv
    assert configs_of("train --preset paper-long --dataset hyperpartisan")[0].epochs == 20


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"epochs": 5}, {"arxiv": 5, "hyperpartisan": 5, "20newsgroups": 5}),  # a given setting beats Table 5's
        ({"batch_size": 8}, {"arxiv": 10, "hyperpartisan": 20, "20newsgroups": 10}),  # others keep the preset's
    ],
)
def test_given_settings_win_over_the_preset_and_its_dataset_settings(given, expected):
    configs = comparison_configs("paper-long", **given)
    assert {c.dataset: c.epochs for c in configs} == expected
    assert all(getattr(c, name) == value for c in configs for name, value in given.items())
    flags = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in given.items())
    assert {c.dataset: c.epochs for c in configs_of(f"compare --preset paper-long {flags}")} == expected


@pytest.mark.parametrize("method, search", sorted(SEARCHES.items()))
def test_appendix_b_grids_are_on_the_method_classes(method, search):
    assert tuple(sorted(METHODS[method].learning_rate_search)) == search
    assert METHODS[method].in_long_document_table


def test_methods_outside_the_table_have_no_search_and_are_not_in_it():
    for name, cls in METHODS.items():
        if name not in TABLE_METHODS:
            assert cls.learning_rate_search == () and not cls.in_long_document_table, name


def test_the_grid_is_17_runs_per_dataset_and_seed_and_each_rate_a_group_of_seeds():
    configs = configs_of(THE_COMMAND + " --lr-grid")
    assert len(configs) == 17 * 3 * 3  # 5 rates x 3 prefix methods + 2 fine-tuning, 3 datasets, 3 seeds
    for dataset in PAPER_DATASETS:
        rates = {(c.method, c.learning_rate) for c in configs if c.dataset == dataset and c.seed == 0}
        assert rates == {(m, r) for m, search in SEARCHES.items() for r in search}
    groups: dict[str, set] = {}
    for config in configs:
        groups.setdefault(group_key(config), set()).add(
            (config.dataset, config.method, config.learning_rate, config.seed)
        )
    assert len(groups) == 17 * 3  # one group per (dataset, method, rate) ...
    assert all(
        len(members) == 3 and len({m[:3] for m in members}) == 1 for members in groups.values()
    )  # ... of 3 seeds
    assert {c.label for c in configs if c.method == "fine-tuning"} == {"fine-tuning lr=3e-05", "fine-tuning lr=5e-05"}


def test_a_method_without_a_search_keeps_its_one_rate_beside_those_with_one():
    configs = comparison_configs("paper-long", ["lora", "fine-tuning"], ["hyperpartisan"], lr_grid=True)
    assert [(c.method, c.learning_rate) for c in configs] == [
        ("lora", 5e-4),
        ("fine-tuning", 3e-5),
        ("fine-tuning", 5e-5),
    ]


@pytest.mark.parametrize(
    "command, message",
    [
        ("train --preset paper-long --dataset arxiv,hyperpartisan", "train takes one dataset, not a list"),
        ("compare --preset paper-long --dataset arxiv,nope", "'nope' is not a file, a folder, or one of: bbc-news"),
        ("compare --preset paper-long --dataset arxiv,,hyperpartisan", "an empty name is not a file"),
        ("compare --preset paper-long --dataset arxiv,arxiv", "--dataset lists a dataset twice"),
        ("compare --preset paper-long --methods lora --lr-grid", "no learning-rate search is recorded for lora"),
        ("compare --preset paper-long --lr-grid --learning-rate 0.01", "a learning rate or the learning-rate grid"),
    ],
)
def test_bad_dataset_lists_and_grids_are_one_line(command, message, capsys, tmp_path):
    assert cli.main([*command.split(), "--runs-dir", str(tmp_path)]) == 1  # refused before any run is planned
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("peftviz: error: ") and message in err, err
