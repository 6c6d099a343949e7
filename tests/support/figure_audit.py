"""The figure audit: what a page's charts look like as the browser drew them, as a list of problems.

Python builds a plotly figure; plotly.js lays it out. Ranges, margins and label positions are decided
in the browser, so a figure object can be right while the drawn chart is wrong (an ECE axis of 0 to
4 for values under 0.13). The audit reads what plotly.js drew, from the live graph divs
(`.data`, `._fullData`, `._fullLayout`) and the DOM's bounding boxes, and reports:

- `range`: a finite data point of a visible trace (or a line or band drawn on data coordinates)
  outside its axis's drawn range; or an axis that spans more than `MAX_SPAN`× its data's extent
  (from 0, for an axis that starts at 0), unless it is a fixed probability axis within [0, 1] or
  the figure says why in `layout.meta["axis_spans"][<axis>]`;
- `overlap`: a title, subtitle, panel title, axis title, legend or colour bar that overlaps
  (or comes within `GAP` px of) another of them, or reaches more than 1 px into a plot area;
- `text`: two texts of a chart (tick labels, annotations, heatmap cell numbers, trace texts) whose
  drawn boxes (rotated with their text) intersect or come within `TEXT_GAP` px of each other: numbers
  printed into each other ("0.0480.027"), tick labels on top of one another;
- `clipped`: a chart label cut at its chart's edge; or text, an equation or a table of the page
  that is cut off or scrolled horizontally;
- `csv`: a chart without its CSV download, an empty CSV, or one whose columns miss a plotted number;
- `fold`: (Tour) a figure not wholly inside the viewport.

Each check is shown to catch a planted fault (tests/support/planted_faults.py) in test_browser.py.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from pathlib import Path

MAX_SPAN = 10  # an axis may span at most this many times its data's extent
GAP = 2  # px: boxes closer than this touch
TEXT_GAP = 1  # px: texts whose boxes are closer than this read as one ("0.048" and "0.027" as "0.0480.027")

# what the checks share: a chart's Streamlit key (null: none), its name in a problem (its title's text
# as drawn, no markup, and its key), and a trace's array (plain or typed) as a list
_CHART_NAME = """
const chartKey = plot => {
  const keyed = plot.closest('[class*="st-key-"]');
  return keyed ? [...keyed.classList].find(c => c.startsWith('st-key-')).slice(7) : null;
};
const chartName = plot => {
  const title = plot.querySelector('.gtitle')?.textContent, key = chartKey(plot) ?? '(no key)';
  return title ? `${title.slice(0, 60)} [${key}]` : `[${key}]`;
};
const list = v => (v == null || typeof v !== 'object' || v.length === undefined) ? [] : Array.from(v);
"""

# per chart: finite data points outside the drawn range, and axes far wider than their data
AXIS_PROBLEMS = (
    "([maxSpan]) => {"
    + _CHART_NAME
    + """
  const problems = [];
  const finite = v => typeof v === 'number' && Number.isFinite(v);
  const axisName = id => id.replace(/^x/, 'xaxis').replace(/^y/, 'yaxis');
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const layout = plot._fullLayout;
    const points = {};  // axis name -> numbers drawn on it
    const add = (id, values) => { (points[axisName(id)] ??= []).push(...values.filter(finite)); };
    for (const trace of plot._fullData) {
      if (trace.visible !== true || !trace.xaxis) continue;
      const data = plot.data[trace.index];
      const horizontal = trace.orientation === 'h';
      const [along, across] = horizontal ? [trace.yaxis, trace.xaxis] : [trace.xaxis, trace.yaxis];
      const position = list(horizontal ? data.y : data.x), value = list(horizontal ? data.x : data.y);
      if (trace.type === 'bar') {  // a bar spans its base (0 unless given) to base + value
        const base = list(data.base);
        add(along, position);
        value.forEach((v, i) => { const b = finite(base[i]) ? base[i] : 0; if (finite(v)) add(across, [b, b + v]); });
      } else if (trace.type === 'box') {
        add(across, ['q1', 'median', 'q3', 'lowerfence', 'upperfence', 'mean'].flatMap(k => list(data[k])));
      } else if (trace.type === 'heatmap') {
        const z = list(data.z);
        add(trace.xaxis, data.x ? list(data.x) : (z.length ? [0, list(z[0]).length - 1] : []));
        add(trace.yaxis, data.y ? list(data.y) : (z.length ? [0, z.length - 1] : []));
      } else {
        add(trace.xaxis, list(data.x)); add(trace.yaxis, list(data.y));
        for (const [bars, axis, centre] of [[trace.error_y, trace.yaxis, list(data.y)],
                                            [trace.error_x, trace.xaxis, list(data.x)]]) {
          if (!bars?.visible || !bars.array) continue;
          const up = list(bars.array), down = bars.symmetric ? up : list(bars.arrayminus);
          add(axis, centre.flatMap((c, i) => [c + (up[i] ?? 0), c - (down[i] ?? 0)]));
        }
      }
    }
    for (const shape of layout.shapes ?? []) {  // lines and bands drawn on data coordinates
      for (const [ref, ends] of [[shape.xref, [shape.x0, shape.x1]], [shape.yref, [shape.y0, shape.y1]]]) {
        if (/^[xy]\\d*$/.test(ref)) add(ref, ends);
      }
    }
    const groups = {};  // axes that match one another share one extent
    for (const [name, values] of Object.entries(points)) {
      const axis = layout[name];
      if (!axis || ['category', 'multicategory', 'date'].includes(axis.type)) continue;
      const scaled = axis.type === 'log' ? values.filter(v => v > 0).map(Math.log10) : values;
      const [low, high] = [...axis.range].sort((a, b) => a - b);
      const slack = 1e-9 * Math.max(high - low, 1e-12);
      const outside = scaled.filter(v => v < low - slack || v > high + slack);
      if (outside.length) {
        problems.push(`${chartName(plot)}: ${outside.length} point(s) on ${name} outside its drawn range `
                      + `[${low.toPrecision(4)}, ${high.toPrecision(4)}], e.g. ${outside[0].toPrecision(4)}`);
      }
      const group = groups[axis.matches ?? axis._id] ??= {names: [], values: [], low, high, axis};
      group.names.push(name); group.values.push(...scaled);
    }
    const reasons = layout.meta?.axis_spans ?? {};
    for (const group of Object.values(groups)) {
      if (group.low === 0) group.values.push(0);  // an axis from 0 (of ECE, of counts) is measured from 0
      const extent = Math.max(...group.values) - Math.min(...group.values);
      const span = group.high - group.low;
      const probability = group.axis.autorange === false && group.low >= -0.1 && group.high <= 1.1;
      const said = group.names.some(name => reasons[name]);
      if (extent > 0 && span > maxSpan * extent && !probability && !said) {
        problems.push(`${chartName(plot)}: ${group.names.join('/')} spans ${span.toPrecision(3)} for data `
                      + `spanning ${extent.toPrecision(3)} (${(span / extent).toFixed(1)}×)`);
      }
    }
  }
  return problems;
}"""
)

# per chart: pairs of titles, legends, colour bars and plot areas that overlap or touch
OVERLAPS = (
    "([gap]) => {"
    + _CHART_NAME
    + """
  const problems = [];
  const box = (name, rect) => ({name, left: rect.left, right: rect.right, top: rect.top, bottom: rect.bottom});
  const drawn = rect => rect.width > 0 && rect.height > 0;
  const meet = (a, b) => a.left < b.right + gap && b.left < a.right + gap && a.top < b.bottom + gap
                         && b.top < a.bottom + gap;
  const cross = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const inside = (a, b) => a.left >= b.left && a.right <= b.right && a.top >= b.top && a.bottom <= b.bottom;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('svg.main-svg').getBoundingClientRect();
    const labels = [];
    const take = (name, element) => { const r = element.getBoundingClientRect(); if (drawn(r)) labels.push(box(name, r)); };
    plot.querySelectorAll('.g-gtitle .gtitle').forEach(e => take(`title "${e.textContent.slice(0, 40)}"`, e));
    plot.querySelectorAll('.infolayer .annotation').forEach(e => take(`panel title "${e.textContent.slice(0, 40)}"`, e));
    plot.querySelectorAll('.infolayer [class^="g-x"][class$="title"] text, .infolayer [class^="g-y"][class$="title"] text')
        .forEach(e => take(`axis title "${e.textContent.slice(0, 40)}"`, e));
    plot.querySelectorAll('.legend .bg').forEach(e => take('legend', e));
    plot.querySelectorAll('.colorbar').forEach(e => take(`colour bar "${e.textContent.slice(0, 30)}"`, e));
    const areas = Object.entries(plot._fullLayout._plots ?? {}).map(([id, p]) => box(`plot area ${id}`, {
      left: svg.left + p.xaxis._offset, right: svg.left + p.xaxis._offset + p.xaxis._length,
      top: svg.top + p.yaxis._offset, bottom: svg.top + p.yaxis._offset + p.yaxis._length}));
    const found = [];
    labels.forEach((a, i) => {
      labels.slice(i + 1).forEach(b => { if (meet(a, b) && !inside(a, b) && !inside(b, a)) found.push(`${a.name} and ${b.name}`); });
      areas.forEach(b => { if (cross(a, b)) found.push(`${a.name} and ${b.name}`); });
    });
    for (const pair of found) problems.push(`${chartName(plot)}: ${pair} overlap`);
  }
  return problems;
}"""
)

# per chart: pairs of texts drawn on top of each other. A text's box is its SVG bounding box less the line's
# spacing above and below its glyphs (an eighth of its height each: plotly's auto-angled tick labels, apart
# as glyphs, touched as line boxes), mapped to the screen by its own transform, so a rotated tick label is a
# rotated rectangle; two boxes collide when no axis that could separate them (separating axis theorem)
# leaves `gap` px between them.
TEXT_OVERLAPS = (
    "([gap]) => {"
    + _CHART_NAME
    + """
  const problems = [];
  const corners = element => {
    const b = element.getBBox(), m = element.getScreenCTM(), top = b.y + b.height / 8, bottom = b.y + b.height * 7 / 8;
    return [[b.x, top], [b.x + b.width, top], [b.x + b.width, bottom], [b.x, bottom]]
      .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  };
  const axes = quad => quad.map((p, i) => { const q = quad[(i + 1) % 4], dx = q[0] - p[0], dy = q[1] - p[1],
                                              n = Math.hypot(dx, dy) || 1; return [-dy / n, dx / n]; });
  const collide = (a, b) => [...axes(a.quad), ...axes(b.quad)].every(([nx, ny]) => {
    const project = quad => quad.map(([x, y]) => x * nx + y * ny);
    const pa = project(a.quad), pb = project(b.quad);
    return Math.min(Math.max(...pa), Math.max(...pb)) - Math.max(Math.min(...pa), Math.min(...pb)) > -gap;
  });
  const selector = '.xtick text, .ytick text, .annotation-text, .heatmap-label text, .textpoint text, .bartext';
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const texts = [];
    for (const element of plot.querySelectorAll(selector)) {
      const text = element.textContent.trim(), box = element.getBoundingClientRect();
      if (text && box.width > 0 && box.height > 0 && getComputedStyle(element).visibility !== 'hidden'
          && getComputedStyle(element).display !== 'none') texts.push({text, quad: corners(element)});
    }
    const pairs = [];
    texts.forEach((a, i) => texts.slice(i + 1).forEach(b => { if (collide(a, b)) pairs.push([a.text, b.text]); }));
    if (pairs.length) {
      const [a, b] = pairs[0];
      problems.push(`${chartName(plot)}: ${pairs.length} pair(s) of texts overlap or touch, e.g. "${a.slice(0, 30)}" `
                    + `and "${b.slice(0, 30)}"`);
    }
  }
  return problems;
}"""
)

# every title, tick label, legend, colour bar and trace text whose box sticks out of its chart (cut at its edge)
CLIPPED_LABELS = (
    "() => {"
    + _CHART_NAME
    + """
  const clipped = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('svg.main-svg').getBoundingClientRect();
    const div = plot.getBoundingClientRect();  // the page may show less of the chart than its SVG
    const frame = {left: Math.max(svg.left, div.left), right: Math.min(svg.right, div.right),
                   top: Math.max(svg.top, div.top), bottom: Math.min(svg.bottom, div.bottom)};
    for (const label of plot.querySelectorAll('.gtitle, .xtick text, .ytick text, .annotation, .legendtext, .colorbar text, '
                                              + '.textpoint text, .bartext')) {  // the traces' own text too
      const box = label.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;  // not drawn
      if (box.left < frame.left - 1 || box.right > frame.right + 1 || box.top < frame.top - 1
          || box.bottom > frame.bottom + 1) clipped.push(`${chartName(plot)}: "${label.textContent.slice(0, 40)}" cut at the chart's edge`);
    }
  }
  return clipped;
}"""
)

# text, equations and tables of the page cut off at the window's right edge or hidden behind a
# horizontal scroll (charts are the labels' check above)
CLIPPED_PAGE = """() => {
  const main = document.querySelector('[data-testid="stMain"]') ?? document.body;
  const scrolls = style => ['hidden', 'auto', 'scroll', 'clip'].includes(style.overflowX);
  const what = element => {
    const owner = element.closest('[data-testid]');
    const text = (element.textContent || owner?.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 50);
    return `${owner?.dataset.testid ?? element.tagName} "${text}"`;
  };
  const clipped = new Set();
  for (const element of main.querySelectorAll('*')) {
    // SVG parts are clipped by their own <svg> (KaTeX's √ is a wide path); an input scrolls its own value
    if (!(element instanceof HTMLElement) || ['INPUT', 'TEXTAREA'].includes(element.tagName)) continue;
    if (element.closest('.js-plotly-plot, [data-testid="stSidebar"], [data-baseweb="popover"], .katex-mathml')) continue;
    const rect = element.getBoundingClientRect();  // under 3 px: a visually hidden input, for screen readers
    if (rect.width < 3 || rect.height < 3 || getComputedStyle(element).visibility === 'hidden') continue;
    if (rect.right > window.innerWidth + 1) clipped.add(`${what(element)} runs past the window's right edge`);
    else if (element.scrollWidth > element.clientWidth + 1 && scrolls(getComputedStyle(element))) {
      clipped.add(`${what(element)} is cut: ${element.scrollWidth} px wide in ${element.clientWidth} px`);
    }
  }
  return [...clipped];
}"""

# per chart: its Streamlit key and the numbers it plots (bars: base and top; boxes: the quartiles; heatmaps: z)
PLOTTED_NUMBERS = (
    "() => {"
    + _CHART_NAME
    + """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => {
  const numbers = [];
  for (const trace of plot._fullData) {
    if (trace.visible !== true) continue;
    const data = plot.data[trace.index];
    const value = list(trace.orientation === 'h' ? data.x : data.y);
    if (trace.type === 'heatmap') numbers.push(...list(data.z).flatMap(list));
    else if (trace.type === 'box') numbers.push(...['q1', 'median', 'q3', 'lowerfence', 'upperfence'].flatMap(k => list(data[k])));
    else if (trace.type === 'bar' && data.base != null) {
      const base = list(data.base);
      value.forEach((v, i) => { if (v != null && base[i] != null) numbers.push(base[i], base[i] + v); });
    } else numbers.push(...value);
  }
  return {key: chartKey(plot), title: plot.querySelector('.gtitle')?.textContent ?? '',
          numbers: numbers.filter(Number.isFinite)};
});
}"""
)


def csv_numbers(text: str) -> list[float]:
    """Every cell of a CSV that reads as a finite number."""
    found = []
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            try:
                value = float(cell)
            except ValueError:
                continue
            if math.isfinite(value):
                found.append(value)
    return found


def missing_numbers(plotted: list[float], in_csv: list[float], rel: float = 1e-6) -> list[float]:
    """The plotted numbers that no CSV cell equals (to `rel`, relative; 1e-12 absolute)."""
    known = sorted(in_csv)
    missing = []
    for value in plotted:
        tolerance = max(abs(value) * rel, 1e-12)
        if not any(abs(value - other) <= tolerance for other in _near(known, value)):
            missing.append(value)
    return missing


def _near(known: list[float], value: float) -> list[float]:
    """The two sorted values either side of `value`."""
    at = bisect.bisect_left(known, value)
    return known[max(at - 1, 0) : at + 1]


def csv_problems(page) -> list[str]:
    """Each chart's CSV download (the button keyed `<chart key>-csv`): present, not empty, and with
    every number the chart plots among its cells."""
    problems = []
    for chart in page.evaluate(PLOTTED_NUMBERS):
        name = f"{chart['title'][:60]} [{chart['key']}]"
        button = page.locator(f".st-key-{chart['key']}-csv [data-testid=stDownloadButton] button")
        if not chart["key"] or button.count() == 0:
            problems.append(f"{name}: no CSV download")
            continue
        with page.expect_download() as download:
            button.first.click()
        text = Path(download.value.path()).read_text(encoding="utf-8")
        numbers = csv_numbers(text)
        if not numbers:
            problems.append(f"{name}: the CSV has no numbers")
            continue
        missing = missing_numbers(chart["numbers"], numbers)
        if missing:
            problems.append(f"{name}: {len(missing)} plotted number(s) not in its CSV, e.g. {missing[0]:.6g}")
    return problems


def fold_problems(page) -> list[str]:
    """Charts not wholly inside the viewport (a projector shows no more)."""
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    problems = []
    for box in page.evaluate(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot'), p => "
        "{const r = p.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, "
        "left: r.left, right: r.right, title: p.querySelector('.gtitle')?.textContent ?? ''}})"
    ):
        if box["top"] < 0 or box["left"] < 0 or box["bottom"] > height + 1 or box["right"] > width + 1:
            problems.append(
                f"{box['title'][:60]}: drawn at {box['top']:.0f}–{box['bottom']:.0f} px in a {width}×{height} window"
            )
    return problems


def audit(page, csv: bool = True, fold: bool = False) -> dict[str, list[str]]:
    """Every check on the page as drawn now: kind -> problems (empty lists when all is well)."""
    found = {"fold": fold_problems(page) if fold else []}  # first: the CSV buttons' clicks scroll the page
    found |= {
        "range": page.evaluate(AXIS_PROBLEMS, [MAX_SPAN]),
        "overlap": page.evaluate(OVERLAPS, [GAP]),
        "text": page.evaluate(TEXT_OVERLAPS, [TEXT_GAP]),
        "clipped": page.evaluate(CLIPPED_LABELS) + page.evaluate(CLIPPED_PAGE),
        "csv": csv_problems(page) if csv else [],
    }
    return found


def problems_of(found: dict[str, list[str]]) -> list[str]:
    """All problems in one list, each prefixed by its kind."""
    return [f"{kind}: {problem}" for kind, problems in found.items() for problem in problems]
