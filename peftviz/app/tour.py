"""The Tour: the papers' ideas in the order a reading group meets them, one figure from the store each.

Each step is two sentences, the equation they explain, and the runs its figure is drawn from;
`pages/6_Tour.py` draws it large, for a projector. A step whose runs the store lacks says which
method to train instead of drawing an empty figure. The steps, in order:

1. prefixes          prefix-tuning's extra keys and values, prefix-propagation's extra positions
2. attention         where a prefix run's attention goes: λ(C) per layer and head
3. kernel            λ(C) against α: what the kernel form fixes to a constant
4. calibration       ECE over epochs, a panel per method (a setting at several seeds: their mean)
5. averaging         tiny-attention's heads: how different they became, before they are averaged
6. shift             ECE as the test text gets noisier, a panel per method (the Under shift page's defaults)

Every step draws from one comparison (`comparison_of`): the complete runs trained on one model and
dataset with the same data and budget (`COMPARISON_SETTINGS`), so that the steps compare like with like
and can name what they show. The store may hold several; the Tour takes the one that covers the most of
the papers' methods, then the default model's, then the newest. What it leaves out of the store is said
in one line per reason (`left_out`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

from peftviz.analysis import kernel, tiny_heads
from peftviz.run_config import TrainConfig, comparison_methods
from peftviz.store.runs import Run, group_runs

# what the runs of one comparison share: the encoder, the data and its split, and the training budget
# (the learning rate is each method's own under a preset, so it is left out)
COMPARISON_SETTINGS = ("model", "dataset", "limit", "max_length", "data_seed", "epochs")
DEFAULT_MODEL = next(f.default for f in fields(TrainConfig) if f.name == "model")


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    text: str  # two sentences
    equation: str  # LaTeX
    missing: str  # what to train when the store has no run for this step
    pick: Callable[[list[Run]], list[Run]]  # the runs the figure is drawn from; [] when none fits


@dataclass(frozen=True)
class Comparison:
    """The complete runs the Tour draws from: one model and dataset, the same data and budget."""

    settings: dict  # COMPARISON_SETTINGS -> their values
    runs: list[Run]  # the newest complete run of each label, in the store's order
    members: list[Run] = field(default_factory=list)  # every run of these settings the Tour may draw (all seeds)

    @property
    def name(self) -> str:
        """ "minilm on bbc-news (120 examples per split, 32 tokens, 2 epochs)": what every step names."""
        limit = self.settings["limit"]
        examples = f"{limit} examples per split, " if limit else ""
        epochs = self.settings["epochs"]
        return (
            f"{self.settings['model']} on {self.settings['dataset']} ({examples}{self.settings['max_length']} "
            f"tokens, {epochs} epoch{'s' if epochs != 1 else ''})"
        )


def comparison_settings(run: Run) -> tuple:
    return tuple(getattr(run.config, name) for name in COMPARISON_SETTINGS)


def comparisons(runs: list[Run]) -> list[Comparison]:
    """The store's comparisons (complete runs trained here, by COMPARISON_SETTINGS), the Tour's choice first:
    the one covering the most of the papers' methods, then the default model's, then the newest."""
    by_settings: dict[tuple, list[int]] = {}  # settings -> indices of their runs in the store's order (oldest first)
    for index, run in enumerate(runs):
        if run.status == "complete" and run.metrics and run.trained_here:
            by_settings.setdefault(comparison_settings(run), []).append(index)
    papers = set(comparison_methods())

    def rank(settings: tuple) -> tuple:
        covered = {runs[index].config.method for index in by_settings[settings]} & papers
        return len(covered), settings[0] == DEFAULT_MODEL, max(by_settings[settings])

    ordered = sorted(by_settings, key=rank, reverse=True)
    members = {settings: [runs[i] for i in by_settings[settings]] for settings in ordered}
    return [
        Comparison(dict(zip(COMPARISON_SETTINGS, settings)), one_per_label(members[settings]), members[settings])
        for settings in ordered
    ]


def comparison_of(runs: list[Run]) -> Comparison | None:
    """The comparison every step draws from (see `comparisons`); None when the store has no complete run."""
    found = comparisons(runs)
    return found[0] if found else None


def one_per_label(runs: list[Run]) -> list[Run]:
    """The newest complete run of each label (method and variant), in the store's order (oldest first)."""
    newest: dict[str, Run] = {}
    for run in runs:
        if run.status == "complete" and run.metrics:
            newest.pop(run.label, None)  # re-inserted last: the order follows the newest runs
            newest[run.label] = run
    return list(newest.values())


def with_their_seeds(runs: list[Run]) -> list[Run]:
    """The newest complete run of each label with the other seeds of its group (`group_runs`), group by group:
    a setting trained at several seeds is drawn as their mean, as the Calibration page draws a group."""
    groups = group_runs([run for run in runs if run.status == "complete" and run.metrics])
    by_run = {run.name: group for group in groups for run in [*group.runs, *group.repeats]}
    picked = [by_run[run.name] for run in one_per_label(runs)]
    return [run for group in {group.key: group for group in picked}.values() for run in group.runs]


def left_out(runs: list[Run], shown: Comparison | None) -> list[str]:
    """What the Tour leaves out of the store's `runs`, one line per reason, naming the runs (a method by its
    label and seed) or the comparisons: unreadable, not complete, recorded from other loops (no parameters),
    imported, or in another comparison than the `shown` one."""
    drawn = {run.name for run in shown.members} if shown else set()
    reasons: dict[str, list[str]] = {}
    for run in runs:
        if run.name not in drawn and (why := _why_left_out(run)):
            reasons.setdefault(why, []).append(_named(run))
    lines = [f"Not drawn, {why}: {', '.join(named)}." for why, named in reasons.items()]
    others = [
        f"{other.name}, data seed {other.settings['data_seed']} ({_runs_count(other.members)})"
        for other in comparisons(runs)
        if not shown or other.settings != shown.settings
    ]
    return lines + (
        [f"Not drawn, other comparisons (another model, data or budget): {'; '.join(others)}."] if others else []
    )


def _runs_count(runs: list[Run]) -> str:
    return f"{len(runs)} run{'' if len(runs) == 1 else 's'}"


def _named(run: Run) -> str:
    """A left-out run as a reader knows it: its method label and seed (and status, when not complete); an
    unreadable one by its folder."""
    if run.config is None:
        return run.name
    return f"{run.label} seed {run.seed}" + ("" if run.status == "complete" else f" ({run.status})")


def _why_left_out(run: Run) -> str | None:
    """Why a run is in no comparison; None for a run of one (drawn, or in another comparison)."""
    if run.config is None:
        return "unreadable"
    if run.recorded:
        return (
            "recorded from other training loops (they hold predictions, not the parameters the attention steps "
            "rebuild a model from)"
        )
    if run.imported:
        return "imported, not trained here"
    if run.status != "complete" or not run.metrics:
        return "not complete"
    return None


def where_attention_goes(runs: list[Run]) -> list[Run]:
    """A run whose queries weigh the prefixes by λ(C) themselves (α free), else any run with prefix keys."""
    complete = one_per_label(runs)
    free = [run for run in complete if kernel.sweepable(run) and kernel.alpha_free(run)]
    return (free or [run for run in complete if run.has_params and run.method_class.prefix_keys])[:1]


def lambda_against_alpha(runs: list[Run]) -> list[Run]:
    """A run trained at a fixed α (its α drawn beside its λ(C)), else one whose λ(C) is free."""
    candidates = kernel.propagation_runs(one_per_label(runs))
    fixed = [run for run in candidates if kernel.fixed_alpha(run) is not None]
    return (fixed or candidates)[:1]


def most_heads(runs: list[Run]) -> list[Run]:
    """The complete run with the most heads to average: averaging one head changes nothing."""
    found = tiny_heads.multi_head_first(one_per_label(runs))
    return found[:1] if found and tiny_heads.head_shape(found[0])[0] > 1 else []


STEPS = [
    Step(
        "prefixes",
        "Prefixes: a few trained vectors steer a frozen encoder",
        "Prefix-tuning gives every layer j trained keys and values that each token may attend to; the "
        "encoder's own weights stay frozen. Prefix-propagation prepends j trained positions instead, which have "
        "queries of their own, so they read the text and carry it up the layers, with half the parameters.",
        r"\begin{aligned} & \text{Prefix-tuning:} \\ & \quad H = \mathrm{Attn}\big(CW_q,\ [P_k; CW_k],\ [P_v; CW_v]\big) \\ "
        r"& \text{Prefix-propagation:} \\ & \quad D^{(l)} = [P^{(l)} + C_{:j};\ C_{j:}] \\ "
        r"& \quad H = \mathrm{Attn}(D W_q, D W_k, D W_v) \end{aligned}",
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
        "Train a method with prefixes on the Train page, or the quick comparison on the Home page.",
        where_attention_goes,
    ),
    Step(
        "kernel",
        "λ(C) against α: what the kernel form fixes",
        "Softmax attention over [prefixes; text] is a text term plus λ(C) times a prefix term, each normalised on "
        "its own, and the softmax picks λ(C) for every query. The kernel form replaces λ(C) by one constant α per "
        "layer: the boxes show the λ(C) a run's queries took, and the line the α the kernel run trained with.",
        r"\begin{aligned} & \text{softmax:} \\ & \quad H = (1-\lambda(C))\,\mathrm{Kern}(Q, CW_k, CW_v) \\ "
        r"& \qquad + \lambda(C)\,\mathrm{Kern}(Q, PW_k, PW_v) \\ "
        r"& \text{kernel form:} \\ & \quad H = \mathrm{Kern}(Q, CW_k, CW_v) \\ & \qquad + \alpha\,\mathrm{Kern}(Q, PW_k, PW_v) "
        r"\end{aligned}",
        "Train the quick comparison on the Home page: its kernel-form run.",
        lambda_against_alpha,
    ),
    Step(
        "calibration",
        "Calibration per method, epoch by epoch",
        "A model is calibrated when its confidence matches its accuracy: of the answers given with 80% "
        "confidence, 80% are right. ECE is the gap between the two, weighted by how many answers fall in each "
        "confidence bin; lower is better, and the Calibration page adds intervals and significance tests.",
        r"\mathrm{ECE} = \sum_b \frac{n_b}{N}\,\big|\mathrm{acc}(b) - \mathrm{conf}(b)\big|",
        "Train the quick comparison on the Home page.",
        with_their_seeds,
    ),
    Step(
        "averaging",
        "Averaging heads: M experts at the cost of one",
        "The Tiny-Attention adapter trains M small heads per layer, which start as perturbed copies of one "
        "trained head and drift apart into different experts. After training their parameters are averaged into "
        "one head, so M heads cost one at inference; the grid shows how alike each pair of heads ended.",
        r"\begin{aligned} \bar W_{Q,K,V} &= \frac{1}{M}\sum_{m=1}^{M} W^{(m)}_{Q,K,V} \\ "
        r"\sum_{m=1}^{M} O^{(m)} \tilde z^{(m)} &\longrightarrow \Big(\sum_{m=1}^{M} O^{(m)}\Big) \tilde z "
        r"\end{aligned}",
        "Train the quick comparison on the Home page: its 4-head adapter run.",
        most_heads,
    ),
    Step(
        "shift",
        "Under shift: does calibration hold on noisy text?",
        "Each model reads its test documents again with typos, keyboard slips, OCR errors or deleted words in 5% "
        "to 50% of the words (severities 1 to 5, after Ovadia et al., 2019), and ECE is measured at each severity. "
        "A line that climbs is a model growing confidently wrong on text unlike what it was trained on; the Under "
        "shift page adds the intervals, the tests between methods and conformal coverage.",
        r"\mathrm{ECE}_s = \frac{1}{|F|} \sum_{f \in F} \mathrm{ECE}\big(\text{test}_{f,\,s}\big), \quad s = 0, \dots, 5",
        "Train the quick comparison on the Home page.",
        with_their_seeds,
    ),
]


def step_index(value: object) -> int:
    """A step number from a URL (1-based, as shown) -> a list index; anything else -> the first step."""
    try:
        number = int(str(value))
    except ValueError:
        return 0
    return min(max(number, 1), len(STEPS)) - 1


def unknown_step(value: object) -> str | None:
    """What to say when a link asks for a step the Tour lacks (and which is shown instead); None when it has it."""
    shown = step_index(value) + 1
    if str(value) == str(shown):
        return None
    return f"The Tour has no step {str(value)[:20]!r}: its steps are 1 to {len(STEPS)}. Showing step {shown}."
