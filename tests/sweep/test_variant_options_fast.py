"""A comparison variant's own options over the caller's: tiny-attention's "4H averaged" stays four heads, averaged,
whatever method options a comparison is given (`peftviz.sweep.variants.variant_configs`).

Configurations only: no model, no training."""

import pytest

from peftviz.methods import METHODS
from peftviz.run_config import preset_config
from peftviz.sweep.variants import comparison_configs, variant_configs

TINY = "tiny-attention"
# what a caller may pass with a comparison: the opposite of the variant's own options, and options it leaves alone
CALLER_OPTIONS = [
    {"n_heads": 2},
    {"average_heads": False},
    {"n_heads": 64, "average_heads": False},
    {"n_heads": 1, "average_heads": False, "init_perturbation": 0.3, "head_dim": 2},
]


def _four_heads(configs):
    [four] = [config for config in configs if config.label == f"{TINY} 4H averaged"]
    return four


@pytest.mark.parametrize("given", CALLER_OPTIONS, ids=lambda given: ",".join(f"{k}={v}" for k, v in given.items()))
def test_the_4h_averaged_variant_stays_four_averaged_heads_whatever_options_the_caller_gives(given):
    four = _four_heads(variant_configs(preset_config("smoke", TINY, method_options=given)))
    assert (four.method_config.n_heads, four.method_config.average_heads) == (4, True)
    for name in given.keys() - {"n_heads", "average_heads"}:  # the caller's other options are kept
        assert four.method_options[name] == given[name]
    # through `compare` (`comparison_configs`), which passes the caller's options on to every method's variants
    compared = _four_heads(comparison_configs("smoke", [TINY], method_options=given))
    assert (compared.method_config.n_heads, compared.method_config.average_heads) == (4, True)


def test_every_variant_of_every_method_keeps_its_own_options_over_the_caller_s():
    variants = [(name, variant) for name, cls in METHODS.items() for variant in cls.variants if variant.options]
    assert variants, "no method declares a variant with options"
    for name, variant in variants:
        for given in CALLER_OPTIONS:
            given = {key: value for key, value in given.items() if key in METHODS[name].config_class.types()}
            configs = variant_configs(preset_config("smoke", name, method_options=given))
            [config] = [config for config in configs if config.label == f"{name} {variant.label}"]
            held = {option: getattr(config.method_config, option) for option in variant.options}
            assert held == dict(variant.options), f"{name} {variant.label} given {given}"
