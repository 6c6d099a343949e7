"""The Tour: the papers' ideas in the order a reading group meets them, one figure from the store each.

Each step is two sentences, the equation they explain, and the runs its figure is drawn from;
`pages/6_Tour.py` draws it large, for a projector. A step whose runs the store lacks says which
method to train instead of drawing an empty figure. The steps, in order:

1. prefixes          prefix-tuning's extra keys and values, prefix-propagation's extra positions
2. attention         where a prefix run's attention goes: λ(C) per layer and head
3. kernel            λ(C) against α: what the kernel form fixes to a constant
4. calibration       ECE over epochs, one line per method
5. averaging         tiny-attention's heads: how different they became, before they are averaged
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from peftviz.runs import Run


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    text: str  # two sentences
    equation: str  # LaTeX
    missing: str  # what to train when the store has no run for this step
    pick: Callable[[list[Run]], list[Run]]  # the runs the figure is drawn from; [] when none fits


def one_per_label(runs: list[Run]) -> list[Run]:
    """The first complete run of each label (method and variant), in the store's order."""
    first: dict[str, Run] = {}
    for run in runs:
        if run.status == "complete" and run.metrics:
            first.setdefault(run.label, run)
    return list(first.values())


def _of_methods(*methods: str) -> Callable[[list[Run]], list[Run]]:
    """A picker: the first complete run of the first of `methods` the store has."""

    def pick(runs: list[Run]) -> list[Run]:
        complete = one_per_label(runs)
        for method in methods:
            found = [run for run in complete if run.config.method == method]
            if found:
                return found[:1]
        return []

    return pick


def most_heads(runs: list[Run]) -> list[Run]:
    """The complete tiny-attention run with the most heads: averaging one head changes nothing."""
    found = [run for run in one_per_label(runs) if run.config.method == "tiny-attention"]
    found.sort(key=lambda run: -int(run.method_config.n_heads))
    return found[:1] if found and int(found[0].method_config.n_heads) > 1 else []


STEPS = [
    Step(
        "prefixes",
        "Prefixes: a few trained vectors steer a frozen encoder",
        "Prefix-tuning gives every layer j trained keys and values that each token may attend to; the "
        "encoder's own weights stay frozen. Prefix-propagation prepends j trained positions instead, which have "
        "queries of their own, so they read the text and carry it up the layers, with half the parameters.",
        r"\begin{aligned} \text{prefix-tuning:}\quad & H = \mathrm{Attn}\big(CW_q,\ [P_k; CW_k],\ [P_v; CW_v]\big) \\ "
        r"\text{prefix-propagation:}\quad & D^{(l)} = [P^{(l)} + C_{:j};\ C_{j:}], \quad "
        r"H = \mathrm{Attn}(D W_q, D W_k, D W_v) \end{aligned}",
        "Train the quick comparison on the Home page.",
        one_per_label,
    ),
    Step(
        "attention",
        "Where attention goes: the share each head gives the prefixes",
        "Each cell is one head of one layer: the share λ(C) of its attention that a validation document's tokens "
        "put on the prefixes, averaged over the tokens. Where it is large the prefixes rewrite a token's state; "
        "where it is near 0 the head reads the text as the frozen encoder would.",
        r"\lambda(C) = \frac{\sum_{k \in P} e^{q \cdot k / \sqrt{d}}}{\sum_{k \in P \cup C} e^{q \cdot k / \sqrt{d}}}",
        "Train prefix-propagation (or prefix-tuning) on the Train page.",
        _of_methods("prefix-propagation", "prefix-tuning"),
    ),
    Step(
        "kernel",
        "λ(C) against α: what the kernel form fixes",
        "Softmax attention over [prefixes; text] is a text term plus λ(C) times a prefix term, each normalised on "
        "its own, and the softmax picks λ(C) for every query. The kernel form replaces λ(C) by one constant α per "
        "layer: the boxes show the λ(C) a run's queries took, and the line the α the kernel run trained with.",
        r"\begin{aligned} \text{softmax:}\quad & H = (1-\lambda(C))\,\mathrm{Kern}(Q, CW_k, CW_v) "
        r"+ \lambda(C)\,\mathrm{Kern}(Q, PW_k, PW_v) \\ "
        r"\text{kernel form:}\quad & H = \mathrm{Kern}(Q, CW_k, CW_v) + \alpha\,\mathrm{Kern}(Q, PW_k, PW_v) "
        r"\end{aligned}",
        "Train kernel-prefix-propagation (or prefix-propagation) on the Train page.",
        _of_methods("kernel-prefix-propagation", "prefix-propagation"),
    ),
    Step(
        "calibration",
        "Calibration per method, epoch by epoch",
        "A model is calibrated when its confidence matches its accuracy: of the answers given with 80% "
        "confidence, 80% are right. ECE is the gap between the two, weighted by how many answers fall in each "
        "confidence bin; lower is better, and the Calibration page adds intervals and significance tests.",
        r"\mathrm{ECE} = \sum_b \frac{n_b}{N}\,\big|\mathrm{acc}(b) - \mathrm{conf}(b)\big|",
        "Train the quick comparison on the Home page.",
        one_per_label,
    ),
    Step(
        "averaging",
        "Averaging heads: M experts at the cost of one",
        "The tiny-attention adapter trains M small heads per layer, which start as perturbed copies of one "
        "trained head and drift apart into different experts. After training their parameters are averaged into "
        "one head, so M heads cost one at inference; the grid shows how alike each pair of heads ended.",
        r"\bar W_{Q,K,V} = \frac{1}{M}\sum_{m=1}^{M} W^{(m)}_{Q,K,V}, \qquad "
        r"\sum_{m=1}^{M} O^{(m)} \tilde z^{(m)} \longrightarrow \Big(\sum_{m=1}^{M} O^{(m)}\Big) \tilde z",
        "Train the quick comparison on the Home page: its 4-head tiny-attention run.",
        most_heads,
    ),
]


def step_index(value: object) -> int:
    """A step number from a URL (1-based, as shown) -> a list index; anything else -> the first step."""
    try:
        number = int(str(value))
    except ValueError:
        return 0
    return min(max(number, 1), len(STEPS)) - 1
