"""The start option (the run a run starts from: tiny-attention's `init_from`, the 1H run of the same seed) is kept out
of a group's key: a comparison's "4H averaged" runs at several seeds, each started from another 1H run, form one group
(`peftviz.store.runs.group_key`, `TrainConfig.key_settings`).

Configurations and made-up run folders (`tests/support/fake_runs.py`): no training."""

from __future__ import annotations

import numpy as np
import torch

from peftviz.methods import METHODS
from peftviz.run_config import TrainConfig
from peftviz.store.runs import group_key, group_runs, list_runs
from peftviz.store.writer import RunWriter
from peftviz.sweep.variants import comparison_configs, with_start
from tests.support.fake_runs import LABELS, N_EXAMPLES, write_run

TINY = "tiny-attention"
SEEDS = (0, 1, 2)


class Trained:
    """What `with_start` reads of a trained run: its parameters' path."""

    def __init__(self, path):
        self.params_path = path


def four_heads(seed: int, start) -> TrainConfig:
    """The comparison's "4H averaged" configuration at `seed`, started from the run whose parameters are `start`."""
    return with_start(comparison_configs("smoke", [TINY], seed=seed)[1], Trained(start))


def write_config_run(root, config: TrainConfig) -> None:
    """A complete run of `config` with one epoch of made-up predictions (as `fake_runs.write_run`)."""
    parameters = {"total": 10, "trainable": 4, "method": 2, "backbone": 6, "head": 2}
    environment = {"created": f"2026-01-02 {config.seed:02d}:00"}
    writer = RunWriter.create(
        root, config, {"label_names": LABELS, "parameters": parameters, "environment": environment}
    )
    rng = np.random.default_rng(config.seed)
    probs = rng.dirichlet(np.ones(len(LABELS)), size=N_EXAMPLES).astype(np.float32)  # (N, C)
    labels = np.random.default_rng(0).integers(0, len(LABELS), size=N_EXAMPLES)  # (N,)
    writer.write_epoch({"epoch": 1, "micro_f1": 0.4, "accuracy": 0.4, "ece": 0.1, "seconds": 1.0}, probs, labels)
    writer.write_params({"head.weight": torch.zeros(3, 4)}, 1)
    writer.write_predictions("test", probs, labels)
    writer.finish({"params_epoch": 1, "test": {"accuracy": 0.4, "ece": 0.1}})


def test_the_start_option_is_kept_out_of_the_group_key():
    option = METHODS[TINY].start_option()
    configs = [four_heads(seed, f"/store/one-head-{seed}/params.safetensors") for seed in SEEDS]
    assert [config.method_options[option] for config in configs] == [
        f"/store/one-head-{seed}/params.safetensors" for seed in SEEDS
    ]
    assert len({group_key(config) for config in configs}) == 1  # every seed its own start, one group
    unstarted = comparison_configs("smoke", [TINY])[1]
    assert group_key(configs[0]) == group_key(unstarted)  # as if it had started from none
    assert option not in configs[0].key_settings["method_options"] and option not in configs[0].setting_options
    assert group_key(configs[0]) != group_key(comparison_configs("smoke", [TINY])[0])  # 4H is not 1H


def test_a_store_s_4h_runs_started_from_other_1h_runs_form_one_group_across_seeds(tmp_path):
    one_heads = [write_run(tmp_path, TINY, seed) for seed in SEEDS]  # the 1H runs, one per seed
    for seed, one in zip(SEEDS, one_heads):
        write_config_run(tmp_path, four_heads(seed, one.path / "params.safetensors"))
    groups = [group for group in group_runs(list_runs(tmp_path)) if group.label == f"{TINY} 4H averaged"]
    assert len(groups) == 1
    [four] = groups
    assert four.seeds == list(SEEDS) and not four.repeats
    starts = {run.config.method_options[METHODS[TINY].start_option()] for run in four.runs}
    assert len(starts) == len(SEEDS)  # each seed's run started from another run
