"""The plan before the spend (`peftviz.sweep.cost`, `--plan`, `probe`): the step-time probe on the CPU with a tiny
Longformer, the expected padded batch length against a Monte-Carlo of its quantile function, each run's steps
counted by hand, the totals, the one-line errors, and the command line end to end. Nothing is trained for real."""

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from peftviz import cli
from peftviz.data.paper_stats import DATASET_STATS
from peftviz.errors import ConfigError
from peftviz.run_config import TrainConfig
from peftviz.sweep import cost
from peftviz.sweep.cost import StepTimes, expected_batch_length, interpolate, plan_table, probe, run_cost

PROBED = ("lora", "prefix-propagation", "fine-tuning")
HYPERPARTISAN_LIKE = {0.25: 280, 0.5: 495, 0.75: 873, 0.9: 1455, 0.95: 1975}  # paper_stats' Hyperpartisan levels


@dataclass(frozen=True)
class Stats:
    """A stand-in for `peftviz.data.paper_stats.DatasetStats`: what the costing reads of it."""

    splits: dict
    length_quantiles: dict
    num_labels: int = 2

    @property
    def token_quantiles(self) -> dict:
        return self.length_quantiles


def hand_times(labels, batch_size=4) -> StepTimes:
    """Step times chosen by hand: forward+backward 0.1 s at 512 and 0.2 s at 1024, AdamW 0.05 s, inference 0.03
    and 0.06 s, at batch 4, for every label."""
    return StepTimes(
        "cpu (test)",
        "fp32",
        "test-model",
        "by hand",
        batch_size,
        (512, 1024),
        1,
        {label: {512: 0.1, 1024: 0.2} for label in labels},
        {label: 0.05 for label in labels},
        {label: {512: 0.03, 1024: 0.06} for label in labels},
    )


@pytest.fixture(scope="module")
def probed():
    """One probe of three methods on the tiny Longformer, on the CPU: seconds."""
    return probe("tiny-longformer", PROBED, [32, 96, 4096], batch_size=2, device="cpu", precision="fp32", steps=1)


def test_the_probe_times_every_method_at_every_length_on_the_cpu_and_says_so(probed):
    assert probed.lengths == (32, 96)  # 4096 is beyond the tiny Longformer's positions: left out, and said so
    for table in (probed.forward_backward, probed.inference):
        assert set(table) == set(PROBED)
        assert all(set(times) == {32, 96} for times in table.values())
        values = [t for times in table.values() for t in times.values()]
        assert all(math.isfinite(t) and t > 0 for t in values)
    assert all(math.isfinite(t) and t > 0 for t in probed.optimizer.values())
    described = "\n".join(probed.describe())
    assert described.startswith("measured on cpu") and "batch 2, lengths 32, 96" in described
    assert "lengths beyond tiny-longformer's 1025 positions left out" in described
    assert len(probed.rows()) == len(PROBED) * 2


@pytest.mark.parametrize(
    "length, expected, extrapolated",
    [
        (512, 0.1, False),
        (768, 0.125, False),  # halfway: linear between probed lengths
        (256, 0.1, False),  # below the shortest: the shortest's time
        (2048, 0.3, True),  # beyond: in proportion to T from the longest, 0.15 * 2048 / 1024
        (4096, 0.6, True),
    ],
)
def test_times_are_linear_between_probed_lengths_and_proportional_beyond_them(length, expected, extrapolated):
    said = []
    assert interpolate({512: 0.1, 1024: 0.15}, length, said.append) == pytest.approx(expected)
    assert bool(said) == extrapolated


def test_a_batch_other_than_the_probed_one_is_scaled_linearly_and_said_so():
    times = hand_times(["x"])
    assert times.seconds("forward_backward", "x", 768, 8) == pytest.approx(0.3)  # 0.15 at batch 4, twice
    assert "batch 8 extrapolated linearly in B from the probed batch 4" in times.notes


def monte_carlo_batch_length(quantiles: dict, max_length: int, batch: int, n: int = 400_000) -> float:
    """Written here apart from the module: documents drawn through the quantile function (np.interp between the
    levels, flat below the lowest; above the highest the last segment's line continued to level 1), the longest
    of each batch truncated at max_length, averaged."""
    levels, values = zip(*sorted(quantiles.items()))
    levels, values = [0.0, *levels], [values[0], *values]
    if levels[-1] < 1:
        slope = (values[-1] - values[-2]) / (levels[-1] - levels[-2]) if len(levels) > 2 else 0.0
        levels, values = [*levels, 1.0], [*values, values[-1] + slope * (1 - levels[-1])]
    rng = np.random.default_rng(0)
    longest = np.interp(rng.random((n, batch)), levels, values).max(axis=1)
    return float(np.minimum(longest, max_length).mean())


@pytest.mark.parametrize(
    "quantiles, max_length, batch",
    [
        (HYPERPARTISAN_LIKE, 4096, 8),  # Q(1) continued above 0.95
        (HYPERPARTISAN_LIKE, 1000, 8),  # truncated inside a segment
        (HYPERPARTISAN_LIKE, 4096, 1),  # one document: the mean
        ({0.1: 50, 0.5: 300, 1.0: 900}, 512, 4),
        ({0.5: 700}, 4096, 8),  # one level: every document that long
    ],
)
def test_the_expected_batch_length_matches_a_monte_carlo_of_the_same_quantile_function(quantiles, max_length, batch):
    exact = expected_batch_length(Stats({}, quantiles), max_length, batch)
    assert exact == pytest.approx(monte_carlo_batch_length(quantiles, max_length, batch), rel=0.01)


@pytest.mark.parametrize(
    "quantiles, max_length, batch, by_hand",
    [
        ({0.0: 100, 1.0: 300}, 4096, 1, 200.0),  # uniform on [100, 300]: its mean
        ({0.0: 100, 1.0: 300}, 4096, 2, 100 + 200 * 2 / 3),  # the larger of two: 100 + 200 E[max(U1, U2)]
        ({0.0: 100, 1.0: 300}, 200, 1, 175.0),  # truncated at 200: half at 150 on average, half at 200
    ],
)
def test_the_expected_batch_length_of_a_uniform_length_by_hand(quantiles, max_length, batch, by_hand):
    assert expected_batch_length(Stats({}, quantiles), max_length, batch) == pytest.approx(by_hand)


@pytest.mark.parametrize(
    "splits, batch, effective, epochs, steps, micro_batches, eval_batches",
    [
        # Hyperpartisan as recorded (paper_stats: 515 / 65 / 65), micro-batches of 4, effective 32, 20 epochs:
        # ceil(515 / 4) = 129 micro-batches an epoch, ceil(129 / 8) = 17 steps; 20 x ceil(65 / 4) + ceil(65 / 4)
        ({"train": 515, "validation": 65, "test": 65}, 4, 32, 20, 340, 2580, 20 * 17 + 17),
        # 20 newsgroups as recorded: ceil(10182 / 4) = 2546, ceil(2546 / 8) = 319; 10 x 283 + 1883
        ({"train": 10182, "validation": 1132, "test": 7532}, 4, 32, 10, 3190, 25460, 2830 + 1883),
        ({"train": 100, "validation": 10, "test": 10}, 8, 8, 3, 39, 39, 3 * 2 + 2),  # no accumulation
    ],
)
def test_a_run_s_steps_and_batches_by_hand(splits, batch, effective, epochs, steps, micro_batches, eval_batches):
    config = TrainConfig(
        method="lora", batch_size=batch, effective_batch_size=effective, epochs=epochs, max_length=4096
    )
    got = run_cost(config, Stats(splits, {0.5: 768}), hand_times(["lora"], batch_size=batch))
    assert (got.optimizer_steps, got.micro_batches, got.eval_batches) == (steps, micro_batches, eval_batches)
    assert got.batch_length == pytest.approx(768)  # every document 768 tokens
    # 0.15 s a micro-batch and 0.045 s an inference batch at 768 tokens (halfway), 0.05 s an AdamW step
    assert got.hours == pytest.approx((micro_batches * 0.15 + steps * 0.05 + eval_batches * 0.045) / 3600)
    # one severity of `report --shift`: the test split under each of the four corruption families
    assert got.shift_seconds == pytest.approx(4 * math.ceil(splits["test"] / batch) * 0.045)


def test_hyperpartisan_s_recorded_train_split_gives_340_steps_in_20_epochs_of_effective_batch_32():
    stats = DATASET_STATS["hyperpartisan"]
    assert stats.splits["train"] == 515  # 645 less 2 x 65 held out (paper_stats)
    config = TrainConfig(
        method="lora", dataset="hyperpartisan", batch_size=4, effective_batch_size=32, epochs=20, max_length=4096
    )
    assert run_cost(config, stats, hand_times(["lora"])).optimizer_steps == 20 * math.ceil(515 / 32) == 340


def test_the_plan_has_a_row_per_run_and_totals_that_are_the_sums_of_its_rows():
    stats = {
        "a": Stats({"train": 100, "validation": 10, "test": 10}, {0.5: 512}),
        "b": Stats({"train": 40, "validation": 8, "test": 8}, {0.5: 1024}),
    }
    configs = [
        TrainConfig(
            method=method,
            dataset=dataset,
            seed=seed,
            batch_size=4,
            effective_batch_size=8,
            epochs=2,
            label=f"{method} lr={rate}",
            learning_rate=rate,
        )
        for dataset in stats
        for method in ("lora", "bitfit")
        for seed in (0, 1)
        for rate in ((1e-3, 1e-2) if seed else (1e-3,))
    ]
    plan = plan_table(configs, hand_times(["lora", "bitfit"]), stats.__getitem__)
    assert len(plan.rows) == 12  # 2 datasets x 2 methods x (1 rate at seed 0 + 2 at seed 1)
    assert [row["optimizer steps"] for row in plan.rows] == [2 * 13] * 6 + [2 * 5] * 6  # ceil(100/8), ceil(40/8)
    assert plan.rows[2]["method"] == "lora lr=0.01" and plan.rows[2]["learning rate"] == 1e-2
    totals = {row["total"]: row for row in plan.totals}
    assert totals["all runs"]["runs"] == 12
    assert totals["all runs"]["optimizer steps"] == sum(row["optimizer steps"] for row in plan.rows) == 216
    assert totals["all runs"]["est. hours"] == pytest.approx(sum(row["est. hours"] for row in plan.rows))
    for key in ("dataset", "method"):
        parts = [row for row in plan.totals if row["total"].startswith(key + " ")]
        assert len(parts) == 2 and sum(row["runs"] for row in parts) == 12  # the rates add up under their method
        assert sum(row["est. hours"] for row in parts) == pytest.approx(totals["all runs"]["est. hours"])
    assert totals["dataset a"]["optimizer steps"] == 6 * 26 and totals["method bitfit"]["runs"] == 6


def test_runs_that_differ_in_rate_seed_label_or_dataset_share_one_probe_and_other_options_do_not():
    grid = [
        TrainConfig(method="lora", label=f"lora lr={rate}", learning_rate=rate, seed=seed, dataset=dataset)
        for rate in (1e-3, 1e-2)
        for seed in (0, 1)
        for dataset in ("a", "b")
    ]
    other = TrainConfig(method="lora", method_options={"r": 4})
    targets = cost.probe_targets([*grid, other])
    assert targets == [("lora", "lora", {}), ("lora r=4", "lora", {"r": 4})]


def test_a_dataset_without_recorded_stats_is_one_line_naming_those_that_have_them():
    with pytest.raises(ConfigError) as err:
        cost.recorded_stats("bbc-news")
    message = str(err.value)
    assert "\n" not in message and "'bbc-news'" in message
    assert all(name in message for name in ("arxiv", "hyperpartisan", "20newsgroups"))


def test_a_model_not_readable_offline_falls_back_to_its_recorded_architecture_and_says_so(monkeypatch):
    tiny = {
        "model_type": "longformer",
        "vocab_size": 100,
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "attention_window": 8,
        "max_position_embeddings": 130,
        "pad_token_id": 1,
    }
    monkeypatch.setitem(cost.RECORDED_ARCHITECTURES, "nobody/not-cached-longformer", tiny)
    times = probe("nobody/not-cached-longformer", ["lora"], [16, 64], 1, "cpu", "fp32", steps=1)
    assert "recorded architecture" in times.architecture and "not in this machine's Hugging Face cache" in (
        times.architecture
    )
    assert all(t > 0 for t in times.forward_backward["lora"].values())


def test_the_recorded_longformer_base_architecture_is_the_checkpoint_s_shape():
    config = cost._recorded_config("allenai/longformer-base-4096")
    shape = (
        config.model_type,
        config.vocab_size,
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.intermediate_size,
        config.attention_window,
        config.max_position_embeddings,
    )
    assert shape == ("longformer", 50265, 768, 12, 12, 3072, 512, 4098)


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: probe("nobody/unknown-model", ["lora"], [16], 1, "cpu"), "it knows the shape of"),
        (lambda: probe("tiny-longformer", ["lora"], [4096], 1, "cpu"), "no probe length fits"),
        (lambda: probe("tiny-longformer", ["lora"], [16], 1, "cpu", steps=0), "at least 1 step"),
        (lambda: cost.probe_for([TrainConfig(model="tiny-bert"), TrainConfig(model="tiny-roberta")]), "one model"),
        (lambda: hand_times(["lora"]).seconds("inference", "bitfit", 512, 4), "did not measure 'bitfit'"),
    ],
)
def test_a_probe_that_cannot_run_is_one_line(call, words):
    with pytest.raises(ConfigError) as err:
        call()
    assert words in str(err.value) and "\n" not in str(err.value)


SMALL = {"hyperpartisan": Stats({"train": 100, "validation": 10, "test": 10}, {0.5: 40, 0.95: 60})}


def test_compare_plan_lists_every_run_and_the_totals_and_trains_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cost, "recorded_stats", SMALL.__getitem__)
    argv = [
        "compare",
        "--preset",
        "smoke",
        "--model",
        "tiny-longformer",
        "--dataset",
        "hyperpartisan",
        "--methods",
        "lora,prefix-propagation",
        "--max-length",
        "64",
        "--seeds",
        "2",
        "--plan",
        "--probe-device",
        "cpu",
        "--runs-dir",
        str(tmp_path / "store"),
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| hyperpartisan |")]
    assert len(rows) == 4  # 2 methods x 2 seeds
    assert all(" | 26 | " in row for row in rows)  # smoke: 2 epochs x ceil(100 / 8) steps
    assert "| all runs | 4 | 104 |" in out
    assert "measured on cpu" in out and "nothing trained (--plan)" in out
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "--plan needs dataset 'bbc-news''s recorded sizes and lengths; recorded: "),  # smoke's dataset
        (["--dataset", "hyperpartisan", "--step-times", "nowhere.json"], "--step-times nowhere.json: does not exist"),
    ],
)
def test_a_plan_that_cannot_be_made_is_one_line(extra, message, tmp_path, capsys):
    argv = ["train", "--preset", "smoke", "--model", "tiny-longformer", "--plan", "--runs-dir", str(tmp_path), *extra]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("peftviz: error: " + message) and err.count("\n") == 1


def test_the_probe_command_prints_the_step_time_table(capsys):
    argv = [
        "probe",
        "--model",
        "tiny-longformer",
        "--methods",
        "lora,prefix-propagation",
        "--lengths",
        "32,64",
        "--batch-size",
        "2",
        "--device",
        "cpu",
        "--steps",
        "1",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith(("| lora |", "| prefix-propagation |")) for line in out.splitlines()) == 4
    assert "measured on cpu" in out and "batch 2, lengths 32, 64" in out


def test_saved_step_times_load_back_equal(probed, tmp_path):
    cost.save_step_times(probed, tmp_path / "times.json")
    loaded = cost.load_step_times(tmp_path / "times.json")
    assert loaded == probed  # every field: device, lengths, each method's times, notes


@pytest.mark.parametrize(
    "text, words",
    [
        (None, "times.json: does not exist"),
        ("{not json", "times.json: not JSON (line 1, column 2: "),
        ('{"device": "cpu"}', "not a step-time table saved by `probe --out`"),
    ],
)
def test_a_step_time_file_that_is_not_one_is_one_line(text, words, tmp_path):
    path = tmp_path / "times.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        cost.load_step_times(path)
    assert "\n" not in str(err.value)


def test_a_step_time_file_missing_a_length_of_a_method_is_one_line(tmp_path):
    times = hand_times(["lora"])
    times.inference["lora"].pop(1024)
    cost.save_step_times(times, tmp_path / "times.json")
    with pytest.raises(ConfigError, match=r"every method needs a time at each of its lengths \(512, 1024\)"):
        cost.load_step_times(tmp_path / "times.json")


def test_a_plan_from_saved_step_times_uses_them_and_probes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cost, "recorded_stats", SMALL.__getitem__)
    monkeypatch.setattr(cost, "probe_for", lambda *a, **k: pytest.fail("probed though times were given"))
    cost.save_step_times(hand_times(["lora", "prefix-propagation"]), tmp_path / "times.json")
    argv = [
        "compare",
        "--preset",
        "smoke",
        "--model",
        "tiny-longformer",
        "--dataset",
        "hyperpartisan",
        "--methods",
        "lora,prefix-propagation",
        "--max-length",
        "64",
        "--plan",
        "--step-times",
        str(tmp_path / "times.json"),
        "--runs-dir",
        str(tmp_path / "store"),
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    configs = cli.configs_of(cli.build_parser().parse_args(argv))
    expected = cost.plan_table(configs, hand_times(["lora", "prefix-propagation"]), SMALL.__getitem__)
    assert f"| all runs | 2 | 52 | {expected.totals[0]['est. hours']:.3g} |" in out  # 2 runs x 26 steps
    assert "read from" in out and "measured on cpu (test)" in out
