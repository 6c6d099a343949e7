"""A comparison's configurations, and runs that start from other runs: what a method declares as data, resolved.

A method may declare the `variants` its comparison trains (`peftviz.methods.base.Variant`) and how a run may
start from another run's trained parameters (`StartFrom`): tiny-attention trains "1H", then "4H averaged",
whose every head starts from the 1H run of the same comparison at the same seed through option `init_from`.
The method knows nothing of sweeps or the store; this module is the planner's side:

- `comparison_configs`: each method's variants on the same data and split (`python -m peftviz compare`), on one
  dataset or several (each with its preset's settings for that dataset), and with `lr_grid` at every learning
  rate of the method's paper's search (`learning_rate_search`);
- `start_index`: which earlier configuration of a sweep a configuration starts from (the sweep waits for it),
  and `with_start`: the configuration with that run's parameters filled in;
- `starting_runs` (what the Train page offers), `check_start` (a start chosen there still fits) and
  `check_start_inside` (a stopped run's start lies inside its store before it resumes).

A starting run fits a configuration when it is complete, of the same method, its options include the
declaration's `requires`, and its `same_settings` and `same_options` equal the configuration's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from peftviz.errors import ConfigError, RunError
from peftviz.run_config import (
    PRESET_DATASETS,
    PRESET_METHOD_SETS,
    TrainConfig,
    comparison_methods,
    preset_config,
)
from peftviz.store.runs import Run

if TYPE_CHECKING:  # the method modules load torch; planning a sweep loads none
    from peftviz.methods.base import StartFrom, Variant


def comparison_configs(
    preset: str,
    methods: str | list[str] | None = None,
    datasets: list[str] | tuple[str, ...] | None = None,
    lr_grid: bool = False,
    **overrides,
) -> list[TrainConfig]:
    """The runs of `python -m peftviz compare`: on each dataset, each method's comparison variants on the same
    data and split, dataset by dataset, each with its preset's settings for that dataset.

    Tiny-attention, for one, runs twice: one head, then four heads started from it and averaged. `methods` None:
    the preset's set (`PRESET_METHOD_SETS`, else the papers'). `datasets` None: the `dataset` override, else the
    preset's datasets (`PRESET_DATASETS`), else the preset's own. With `lr_grid`, a method runs once at each
    rate of its `learning_rate_search` (a method without one keeps its one rate); a ConfigError where no method
    has a search, or a learning rate is given as well.
    """
    methods = comparison_methods(PRESET_METHOD_SETS.get(preset, "paper") if methods is None else methods)
    if datasets is None:
        datasets = [overrides.pop("dataset")] if "dataset" in overrides else PRESET_DATASETS.get(preset, [None])
    if lr_grid:
        _check_lr_grid(methods, overrides)
    return [
        config
        for dataset in datasets
        for method in methods
        for variant in variant_configs(preset_config(preset, method, **_on(dataset, overrides)))
        for config in (searched_rates(variant) if lr_grid else [variant])
    ]


def _on(dataset: str | None, overrides: dict) -> dict:
    return overrides if dataset is None else {**overrides, "dataset": dataset}


def searched_rates(config: TrainConfig) -> list[TrainConfig]:
    """`config` at each learning rate of its method's paper's search, labelled with it so that the seeds of one
    rate form a group (`store.runs.group_key` holds every setting but the seed); `[config]` without a search."""
    search = config.method_class.learning_rate_search
    return [replace(config, learning_rate=rate, label=f"{config.name} lr={rate:g}") for rate in search] or [config]


def _check_lr_grid(methods: list[str], overrides: dict) -> None:
    from peftviz.methods import method_class  # the method modules load torch; only a grid asks them

    if "learning_rate" in overrides:
        raise ConfigError("give either a learning rate or the learning-rate grid, not both")
    if not any(method_class(name).learning_rate_search for name in methods):
        names = ", ".join(methods)
        raise ConfigError(
            f"the learning-rate grid has nothing to search: no learning-rate search is recorded for {names}"
        )


def variant_configs(config: TrainConfig) -> list[TrainConfig]:
    """The configurations of `config`'s method's variants (just `config` for a method that declares none)."""
    cls = config.method_class
    return [
        replace(
            config,
            label=f"{cls.name} {variant.label}",
            method_options={**variant.defaults, **config.method_options, **variant.options},
        )
        for variant in cls.variants
    ] or [config]


def _matches(config: TrainConfig, wanted) -> bool:
    """Whether the configuration's method options (defaults filled in) hold every value of `wanted`."""
    options = config.method_config
    return all(getattr(options, name) == value for name, value in dict(wanted).items())


def _variant(config: TrainConfig) -> Variant | None:
    """The variant of its method that starts from another run and whose options `config` has, if any."""
    return next((v for v in config.method_class.variants if v.starts_from and _matches(config, v.options)), None)


def start_index(configs: list[TrainConfig], index: int) -> int | None:
    """The index of the configuration before `index`, at its seed, whose run configuration `index` starts from:
    the last one of its starting variant that fits it. None where it starts from none (or was given one)."""
    config = configs[index]
    start, variant = config.method_class.starts_from, _variant(config)
    if start is None or variant is None or config.method_options.get(start.option):
        return None
    source = next(v for v in config.method_class.variants if v.label == variant.starts_from)
    fitting = [
        i
        for i in range(index)
        if configs[i].seed == config.seed
        and configs[i].method == config.method
        and _matches(configs[i], source.options)
        and _fit(start, configs[i], config) == ""
    ]
    return fitting[-1] if fitting else None


def with_start(config: TrainConfig, starting: Run | None) -> TrainConfig:
    """`config` with the starting run's parameters in its method's start option (`config` itself without one)."""
    start = config.method_class.starts_from
    if starting is None or start is None:
        return config
    return replace(config, method_options={**config.method_options, start.option: str(starting.params_path)})


def _fit(start: StartFrom, source: TrainConfig, config: TrainConfig) -> str:
    """Why the run of `source` cannot start `config` (what differs, for a message), or "" where it can."""
    if source.method != config.method or not _matches(source, start.requires):
        return _not_a_start(start, config.method)
    if source.model != config.model and "model" in start.same_settings:
        return f"was trained on {source.model}, not {config.model}; its parameters fit only that model"
    for name in start.same_settings:
        if getattr(source, name) != getattr(config, name):
            return f"was trained with {name} {getattr(source, name)}, not {getattr(config, name)}"
    theirs, ours = source.method_config, config.method_config
    for name in start.same_options:
        if getattr(theirs, name) != getattr(ours, name):
            return f"has {name} {getattr(theirs, name)}, not {getattr(ours, name)}"
    return ""


def _not_a_start(start: StartFrom, method: str) -> str:
    required = ", ".join(f"{name}={value}" for name, value in start.requires.items())
    return f"is not a complete {method} run" + (f" with {required}" if required else "")


def _may_start(run: Run, method: str) -> bool:
    """A complete run of `method`, with what its method's start declaration requires."""
    if run.status != "complete" or not run.has_params or run.config.method != method:
        return False
    start = run.config.method_class.starts_from
    return start is not None and _matches(run.config, start.requires)


def starting_runs(method_class, runs: list[Run], model: str) -> list[Run]:
    """The runs of `runs` that may start a run of `method_class` on `model`: what the Train page offers for its
    start option, instead of a path typed into a field (empty for a method that starts from none)."""
    start = method_class.starts_from
    if start is None:
        return []
    return [
        run
        for run in runs
        if _may_start(run, method_class.name) and ("model" not in start.same_settings or run.config.model == model)
    ]


def check_start(config: TrainConfig, runs: list[Run]) -> None:
    """ConfigError (one line) when the start option of `config` names no run of `runs` (the store's, by its
    parameters' path), or one that does not fit `config`: what the Train page checks before queueing a job."""
    start = config.method_class.starts_from
    path = config.method_options.get(start.option) if start else None
    if not path:
        return
    run = next((run for run in runs if str(run.params_path) == path), None)
    if run is None or not run.params_path.is_file():
        raise ConfigError(f"the starting run ({start.option}) is no longer in the store; choose another")
    why = _fit(start, run.config, config) if _may_start(run, config.method) else _not_a_start(start, config.method)
    if why:
        raise ConfigError(f"starting run {run.name} ({start.option}) {why}")


def check_start_inside(run: Run) -> None:
    """RunError when a stored run's start option names a file outside its own store (a config.json edited or
    copied from elsewhere): checked before the run resumes, which reads that file."""
    start = run.method_class.starts_from
    target = run.config.method_options.get(start.option) if start else None
    if target and not Path(target).resolve().is_relative_to(run.path.parent.resolve()):
        raise RunError(f"run {run.name}: config.json: {start.option} points outside the store ({target})")
