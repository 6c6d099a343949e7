"""A group's smooth reliability diagram (issue 45): two seeds' t-band filled [0, 1] in stripes (t at one degree of
freedom is 12.7), so below `MIN_BAND_SEEDS` seeds a group draws its seeds' curves and their mean, no band, and
the figure says "too few seeds for a band"; from three seeds on, the mean over its t-band."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from peftviz.analysis import calibration as analysis
from peftviz.calibration import estimators, stats
from peftviz.figures import calibration as figures


def seed_diagrams(n_seeds: int) -> list[estimators.SmoothDiagram]:
    """Each seed's diagram (no band of its own, as a group's runs are smoothed): a run with confidences 0.6 to 1,
    right 80% of the time at seed 0 and 4 points more at each seed after it."""
    found = []
    for seed in range(n_seeds):
        rng = np.random.default_rng(seed)
        top = rng.uniform(0.6, 1.0, 400)  # (N,)
        probs = np.column_stack([top, *(np.tile((1 - top) / 3, (3, 1)))])  # class 0 on top
        labels = np.where(rng.uniform(size=400) < min(0.8 + 0.04 * seed, 0.98), 0, rng.integers(1, 4, 400))
        found.append(estimators.smooth_reliability(probs, labels, band=False))
    return found


def diagram_data():
    """One run's predictions: right 85% of the time, confidences 0.6 to 1."""
    rng = np.random.default_rng(9)
    top = rng.uniform(0.6, 1.0, 300)
    probs = np.column_stack([top, *(np.tile((1 - top) / 3, (3, 1)))])
    return probs, np.where(rng.uniform(size=300) < 0.85, 0, rng.integers(1, 4, 300))


def traces(fig) -> dict:
    return {trace.name: trace for trace in fig.data}


def drawn(trace) -> np.ndarray:
    return np.array([np.nan if y is None else y for y in trace.y], dtype=float)


def test_two_seeds_band_would_fill_the_unit_interval():
    """Why: the t half-width of two curves is 12.7 / 2 = 6.35 times their gap, so a gap of 0.08 spans ±0.51."""
    two = np.array([[0.5], [0.58]])
    assert float(stats.t_half_width(two)[0]) == pytest.approx(scipy_stats.t.ppf(0.975, 1) * 0.04)
    assert 2 * float(stats.t_half_width(two)[0]) > 1.0


def test_a_group_of_two_seeds_draws_its_seeds_and_their_mean_and_no_band():
    diagrams = seed_diagrams(2)
    group = analysis.group_mean_curve(diagrams, seeds=[3, 7])
    assert isinstance(group, analysis.GroupDiagram) and not group.banded and group.seeds == (3, 7)
    assert np.isnan(group.lower).all() and np.isnan(group.upper).all()
    assert np.allclose(group.curve, np.mean([d.curve for d in diagrams], axis=0))
    single = estimators.smooth_reliability(*diagram_data(), n_resamples=20)
    fig = figures.smooth_reliability_figure({"lora": group, "bitfit": single}, "smooth", "95% bootstrap", None)
    found = traces(fig)
    assert not [name for name in found if name.startswith("lora 95%")]  # no band
    assert [name for name in found if name.startswith("bitfit 95%")]  # the single run keeps its bootstrap band
    supported = group.supported()
    for seed, curve in zip((3, 7), group.seed_curves):
        line = found[f"lora seed {seed}"]
        assert line.line.dash == "dot" and line.line.width == 1
        assert np.allclose(drawn(line)[supported], curve[supported]) and np.isnan(drawn(line)[~supported]).all()
    mean = found[f"lora (smECE {group.smooth_ece:.4f})"]
    assert np.allclose(drawn(mean)[supported], group.curve[supported])
    subtitle = fig.layout.title.text
    assert "band: one run: 95% bootstrap" in subtitle
    assert "a group of fewer than 3 seeds: none, too few seeds for a band" in subtitle


def test_a_group_of_three_seeds_is_banded_by_the_t_interval_of_its_mean():
    diagrams = seed_diagrams(3)
    group = analysis.group_mean_curve(diagrams)
    assert group.banded and group.seeds == (0, 1, 2)
    curves = np.stack([d.curve for d in diagrams])
    half = scipy_stats.t.ppf(0.975, 2) * curves.std(axis=0, ddof=1) / np.sqrt(3)
    assert np.allclose(group.upper - group.curve, half) and np.allclose(group.curve - group.lower, half)
    fig = figures.smooth_reliability_figure({"lora": group}, "smooth", "95% bootstrap")
    found = traces(fig)
    high, low = found["lora 95% high"], found["lora 95% low"]
    assert all(0 <= y <= 1 for y in [*high.y, *low.y])  # clipped to where accuracy lies
    assert {f"lora seed {seed}" for seed in range(3)} <= set(found)
    assert "band: a group: 95% t-interval of its seeds' mean" in fig.layout.title.text
    assert "dotted: each seed of a group" in fig.layout.title.text
    assert "too few seeds" not in fig.layout.title.text


def test_one_seed_is_its_own_diagram():
    (only,) = seed_diagrams(1)
    assert analysis.group_mean_curve([only]) is only
