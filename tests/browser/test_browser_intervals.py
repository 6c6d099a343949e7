"""The Calibration page's uncertainty in a real browser: each reliability bar's whisker as plotly drew
it, and the classwise (one-vs-rest) view under the figure audit (tests/support/figure_audit.py).

Reuses test_browser's server, browser and audit (skipped, as it is, without Debian's chromium).
"""

import pytest

from tests.browser.test_browser import PAGES, SIZES, SMOKE_SHOTS, audited, browser, opened, server, settle  # noqa: F401

CLASSWISE = "classwise (one-vs-rest)"

# per bin of a diagram with whiskers: whether a whisker is drawn, its height and centre, its bar's centre,
# and the height the y axis gives the bin's interval (the trace's customdata: conf, acc, count, low, high)
WHISKERS = """() => {
  const found = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    plot._fullData.forEach((trace, index) => {
      if (trace.type !== 'bar' || trace.name !== 'accuracy' || !trace.error_y?.visible) return;  // not recalibration's
      const axis = plot._fullLayout[trace.yaxis.replace('y', 'yaxis')];
      const subplot = plot.querySelector(`.subplot.${trace.xaxis}${trace.yaxis}`);
      const barsBefore = plot._fullData.slice(0, index).filter(
        other => other.type === 'bar' && other.xaxis === trace.xaxis && other.yaxis === trace.yaxis).length;
      const group = subplot.querySelectorAll('.barlayer .trace.bars')[barsBefore];
      const bars = group.querySelectorAll('.point path'), whiskers = group.querySelectorAll('.errorbar');
      plot.data[index].customdata.forEach(([confidence, accuracy, count, low, high], bin) => {
        const whisker = whiskers[bin]?.querySelector('path.yerror')?.getBoundingClientRect();
        const bar = bars[bin].getBoundingClientRect();
        found.push({count, drawn: Boolean(whisker), height: whisker?.height, centre: whisker && whisker.left + whisker.width / 2,
                    bar_centre: bar.left + bar.width / 2, expected: count ? Math.abs(axis.l2p(high) - axis.l2p(low)) : null});
      });
    });
  }
  return found;
}"""


def test_each_accuracy_bar_carries_its_interval_as_drawn(server, browser):  # noqa: F811
    with opened(browser, f"{server}/Calibration", PAGES["Calibration"]) as page:
        bins = page.evaluate(WHISKERS)
    filled = [b for b in bins if b["count"]]
    assert len(filled) >= 6  # a bin or more per diagram
    assert all(not b["drawn"] for b in bins if not b["count"])  # an empty bin: no whisker
    for b in filled:
        assert b["drawn"] and b["height"] == pytest.approx(b["expected"], abs=1.5), b
        assert b["centre"] == pytest.approx(b["bar_centre"], abs=1), b  # over its bar, not beside it


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_the_classwise_view_passes_the_figure_audit(server, browser, size):  # noqa: F811
    with opened(browser, f"{server}/Calibration", PAGES["Calibration"], size) as page:
        page.get_by_text(CLASSWISE, exact=True).click()
        page.wait_for_function(
            "() => document.querySelectorAll('[class*=\"st-key-classwise-\"] .js-plotly-plot').length === 6",
            timeout=300_000,
        )
        settle(page, PAGES["Calibration"])
        assert page.locator('[class*="st-key-reliability-"]').count() == 0
        problems = audited(page, SMOKE_SHOTS, "Calibration-classwise")
    assert problems == [], "\n".join(problems)
