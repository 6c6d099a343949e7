"""A method's declared variants and starting runs, resolved by the sweep planner (`peftviz.sweep.variants`).

No training: configurations and plans only, and made-up runs for `with_start`."""

from dataclasses import replace
from pathlib import Path

from peftviz.methods import METHODS
from peftviz.run_config import over_seeds, preset_config
from peftviz.sweep import plan
from peftviz.sweep.variants import comparison_configs, start_index, variant_configs, with_start

STARTING = next(name for name, cls in METHODS.items() if cls.starts_from and cls.variants)  # tiny-attention


def test_a_method_s_variants_become_its_comparison_s_configs_as_compare_always_labelled_them():
    cls = METHODS[STARTING]
    configs = [config for config in comparison_configs("smoke") if config.method == STARTING]
    assert [config.label for config in configs] == [f"{STARTING} {variant.label}" for variant in cls.variants]
    assert [config.label for config in configs] == [f"{STARTING} 1H", f"{STARTING} 4H averaged"]
    assert configs[0].method_options == {}
    # the order config.json stores: the written-in default, the comparison's options, the variant's own
    assert list(configs[1].method_options.items()) == [
        ("init_perturbation", 0.1),
        ("n_heads", 4),
        ("average_heads", True),
    ]
    given = variant_configs(preset_config("smoke", STARTING, method_options={"init_perturbation": 0.3}))
    assert given[1].method_options["init_perturbation"] == 0.3  # a given option wins over the written-in default
    plain = preset_config("smoke", "lora")
    assert variant_configs(plain) == [plain]  # a method without variants: its config as it is


def test_each_variant_waits_for_the_run_it_starts_from_at_its_own_seed():
    configs = over_seeds(comparison_configs("smoke"), [0, 1])
    starts = {i: start_index(configs, i) for i in range(len(configs)) if start_index(configs, i) is not None}
    assert len(starts) == 2
    for index, start in starts.items():
        four, one = configs[index], configs[start]
        assert (four.label, one.label) == (f"{STARTING} 4H averaged", f"{STARTING} 1H") and four.seed == one.seed
    planned = plan(configs, Path("/nonexistent-store"))
    assert [item.after for item in planned] == [(starts[i],) if i in starts else () for i in range(len(configs))]


def test_a_variant_given_its_starting_run_or_without_one_at_its_seed_waits_for_none():
    one, four = comparison_configs("smoke", [STARTING])
    option = METHODS[STARTING].start_option()
    chosen = replace(four, method_options={**four.method_options, option: "/store/run/params.safetensors"})
    assert start_index([one, chosen], 1) is None  # chosen on the Train page: kept
    assert start_index([one, replace(four, seed=1)], 1) is None  # no one-head run at its seed
    assert start_index([replace(one, model="tiny-roberta"), four], 1) is None  # one that does not fit
    assert start_index([one, four], 0) is None and start_index([one, four], 1) == 0


def test_the_starting_run_s_parameters_are_filled_in():
    four = comparison_configs("smoke", [STARTING])[1]

    class Made:  # what a trained run answers: its parameters' path
        params_path = Path("/store/one-head/params.safetensors")

    filled = with_start(four, Made())
    option = METHODS[STARTING].start_option()
    assert filled.method_options == {**four.method_options, option: "/store/one-head/params.safetensors"}
    assert list(filled.method_options)[-1] == option  # appended, as config.json always stored it
    assert with_start(four, None) == four and with_start(preset_config("smoke", "lora"), Made()).method_options == {}
