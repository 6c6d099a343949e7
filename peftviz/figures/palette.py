"""One palette for every figure that colours by method: a method keeps its colour on every page and
in every selection.

A colour is a function of three things, never of what else is drawn beside it:

* the method: its hue, from its position in the registry `peftviz.methods.METHODS`, so a method
  added there gets the next colour with no line here (a name outside the registry, as any peft
  tuner's `peft:<TYPE>`, gets one of the hues no registered method has, chosen by its name's CRC-32:
  the same in every process and on every page);
* the variant: runs of one method under different labels ("tiny-attention 1H", "tiny-attention
  4H averaged") get different shades of that hue, ranked within the method over the whole store;
  the method's own name comes first and gets the base colour;
* the training seed: a small shift of lightness, so a group's seeds are shades of its colour.
  Seed 0 and a group's mean (seed None) are unshifted.
"""

from __future__ import annotations

import colorsys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace

from plotly.colors import hex_to_rgb, qualitative

from peftviz.methods import METHODS

# ten light hues first (the papers' methods and the first baselines), then 24 darker ones for the methods after them
BASE = qualitative.Plotly + qualitative.Dark24
# lightness shifts: variants far apart (darker, lighter, ...), seeds close to their variant
VARIANT_SHIFTS = (0.0, -0.2, 0.14, -0.32, 0.22)
SEED_SHIFTS = (0.0, 0.07, -0.07, 0.035, -0.035, 0.105, -0.105)
LIGHTNESS = (0.18, 0.86)  # never near black or white


@dataclass(frozen=True)
class Series:
    """What a trace draws, for its colour: a method, the rank of its variant, a seed (None: a group's mean)."""

    method: str
    variant: int = 0
    seed: int | None = None


def method_index(method: str) -> int:
    """The method's position in the registry; a name outside it gets a stable position from its name, past the
    registry's and within BASE where hues are left, so that it never shares a registered method's hue."""
    names = list(METHODS)
    if method in names:
        return names.index(method)
    spare = len(BASE) - len(names)
    return len(names) + zlib.crc32(method.encode()) % (spare if spare > 0 else len(BASE))


def color(series: Series) -> str:
    """The series' colour as "#rrggbb": the method's hue, lighter or darker by variant and seed."""
    red, green, blue = (value / 255 for value in hex_to_rgb(BASE[method_index(series.method) % len(BASE)]))
    hue, lightness, saturation = colorsys.rgb_to_hls(red, green, blue)
    lightness += VARIANT_SHIFTS[series.variant % len(VARIANT_SHIFTS)]
    if series.seed is not None:
        lightness += SEED_SHIFTS[series.seed % len(SEED_SHIFTS)]
    lightness = min(max(lightness, LIGHTNESS[0]), LIGHTNESS[1])
    return "#{:02x}{:02x}{:02x}".format(*(round(v * 255) for v in colorsys.hls_to_rgb(hue, lightness, saturation)))


def translucent(hex_color: str, alpha: float = 0.2) -> str:
    red, green, blue = hex_to_rgb(hex_color)
    return f"rgba({red}, {green}, {blue}, {alpha})"


def store_series(runs: Iterable) -> dict[str, Series]:
    """Run name -> its Series, for runs with `.name`, `.config.method`, `.label` and `.seed`.

    Pass every run of the store, not the selection: a variant's rank (its shade) is counted over
    the runs given, so the same runs give the same colours on every page and in every selection.
    """
    runs = list(runs)
    labels: dict[str, set[str]] = {}
    for run in runs:
        labels.setdefault(run.config.method, set()).add(run.label)
    ranks = {
        method: {label: rank for rank, label in enumerate(sorted(found, key=lambda label: (label != method, label)))}
        for method, found in labels.items()
    }
    return {run.name: Series(run.config.method, ranks[run.config.method][run.label], run.seed) for run in runs}


def unit_series(runs: list, in_store: dict[str, Series]) -> Series:
    """A single run's Series (with its seed), or a group's (its first run's, seed None: the mean)."""
    first = in_store[runs[0].name]
    return first if len(runs) == 1 else replace(first, seed=None)


def series_of(name: str, series: dict[str, Series] | None) -> Series:
    """The Series drawn under `name`; a name nobody described is treated as a method of that name."""
    return (series or {}).get(name) or Series(name)
