"""How many seeds, and how many test documents, each difference of a comparison needs (`report --power`, the
Calibration page's panel beside the comparison).

For every pair of units and metric: the difference seen, the power the comparison had to detect it, and
the fewest seeds on these documents, or documents at these seeds, that would detect it with the target
power at α / (number of pairs) (`peftviz.calibration.power`, whose docstring gives the model and its
assumptions). Units need two seeds or more: one run cannot tell the seeds' variance from the documents'.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from peftviz.analysis.group_stats import Settings, check_metrics, run_estimates, same_examples, seed_draws, unique_names
from peftviz.calibration import estimators, power
from peftviz.store.runs import Group

POWER_COLUMNS = (
    "a",
    "b",
    "metric",
    "difference",
    "seeds_now",
    "documents_now",
    "power_now",
    "seeds_needed",
    "documents_needed",
    "seeds_at_2x",
    "seeds_at_5x",
    "seeds_at_10x",
    "sd_seed",
    "sd_documents",
    "sd_interaction",
    "alpha_per_pair",
    "target",
)


def _row(plan: power.Plan) -> dict:
    parts = plan.components
    more = [plan.seeds_with_more_documents[factor] for factor in power.MORE_DOCUMENTS[1:]]
    return {
        "difference": plan.difference,
        "seeds_now": parts.n_seeds,
        "documents_now": parts.n_documents,
        "power_now": plan.power_now,
        "seeds_needed": plan.seeds,
        "documents_needed": plan.documents,
        **dict(zip(("seeds_at_2x", "seeds_at_5x", "seeds_at_10x"), more)),
        "sd_seed": np.sqrt(parts.seed),
        "sd_documents": np.sqrt(parts.docs),
        "sd_interaction": np.sqrt(parts.inter),
        "alpha_per_pair": plan.alpha,
        "target": plan.target,
    }


def power_table(
    groups: list[Group],
    settings: Settings,
    metrics=None,
    alpha: float = power.ALPHA,
    target: float = power.TARGET,
    progress=None,
) -> pd.DataFrame:
    """Long table, columns POWER_COLUMNS: one row per pair of units (two seeds or more each) and metric.
    progress(done, total) if given, per pair."""
    metrics = check_metrics(metrics)
    n_documents = same_examples(groups, settings)
    estimates = {run.name: run_estimates(run, settings, metrics) for group in groups for run in group.runs}
    names = unique_names(groups)
    pairs = [(a, b) for a, b in combinations(groups, 2) if min(len(a.runs), len(b.runs)) >= 2]
    rows = []
    for done, (a, b) in enumerate(pairs):
        for metric in metrics:
            draws_a, draws_b = seed_draws(a, metric, estimates), seed_draws(b, metric, estimates)
            plan = power.plan_of(draws_a, draws_b, n_documents, len(pairs), alpha, target)
            rows.append({"a": names[a.key], "b": names[b.key], "metric": metric} | _row(plan))
        if progress:
            progress(done + 1, len(pairs))
    return pd.DataFrame(rows, columns=list(POWER_COLUMNS)).astype(
        {
            "seeds_needed": "Int64",
            "documents_needed": "Int64",
            "seeds_at_2x": "Int64",
            "seeds_at_5x": "Int64",
            "seeds_at_10x": "Int64",
        }
    )


def _about(count: int) -> int:
    """`count` rounded up to two significant digits: a plan is not precise to the document."""
    step = 10 ** max(0, len(str(count)) - 2)
    return -(-count // step) * step


def _count(value, unit: str) -> str:
    return f"no number of {unit}" if pd.isna(value) else f"about {_about(int(value)):,} {unit}"


def power_sentence(row) -> str:
    """One pair and metric as the plan reads: "to tell A from B on smooth ECE at the difference seen here …"."""
    heading = estimators.ESTIMATORS[row.metric].heading
    head = (
        f"To tell {row.a} from {row.b} on {heading} at the difference seen here ({row.difference:+.4f}; power now "
        f"{row.power_now:.0%} at {row.seeds_now} seeds)"
    )
    if row.difference == 0:
        return f"{head}: there is no difference to detect."
    seeds = _count(row.seeds_needed, f"seeds on these {row.documents_now:,} documents")
    documents = _count(row.documents_needed, f"documents at {row.seeds_now} seeds")
    sentence = f"{head}: {seeds}, or {documents}"
    if pd.isna(row.seeds_needed) and pd.isna(row.documents_needed):
        both = [(factor, getattr(row, f"seeds_at_{factor}x")) for factor in (2, 5, 10)]
        reachable = [(factor, seeds) for factor, seeds in both if not pd.isna(seeds)]
        if reachable:
            factor, seeds = reachable[0]
            sentence += f"; both together: about {_about(int(seeds))} seeds on {factor * row.documents_now:,} documents"
        else:
            sentence += f", nor {power.MAX_SEEDS:,} seeds on {10 * row.documents_now:,} documents"
    return sentence + "."


def panel_table(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The Calibration page's panel: per pair, for one metric, the difference, the power it had and the plan."""
    rows = table[table["metric"] == metric]
    if rows.empty:
        return pd.DataFrame(columns=["pair", "difference", "power now", "seeds needed", "documents needed"])
    first = rows.iloc[0]
    seeds, documents = f"seeds on these {first.documents_now:,} documents", f"documents at {first.seeds_now} seeds"
    return pd.DataFrame(
        {
            "pair": rows["a"] + " − " + rows["b"],
            "difference": [f"{d:+.4f}" for d in rows["difference"]],
            "power now": [f"{p:.0%}" for p in rows["power_now"]],
            seeds: [_cell(v, d) for v, d in zip(rows["seeds_needed"], rows["difference"])],
            documents: [_cell(v, d) for v, d in zip(rows["documents_needed"], rows["difference"])],
        }
    )


def _cell(value, difference: float) -> str:
    if difference == 0:
        return "no difference"
    return "none reaches it" if pd.isna(value) else f"~{_about(int(value)):,}"


def markdown(table: pd.DataFrame) -> str:
    """`report --power`'s section: how the plans were made, then one line per pair and metric."""
    if table.empty:
        return "How many seeds: no pair of units with two seeds or more each to plan from."
    first, n_pairs = table.iloc[0], len(table.drop_duplicates(["a", "b"]))
    heading = (
        f"How many seeds and documents each difference needs: power {first.target:.0%} at α "
        f"{first.alpha_per_pair * n_pairs:.3g} / {n_pairs} pair{'s' if n_pairs > 1 else ''} = "
        f"{first.alpha_per_pair:.3g} (Holm's strictest "
        "step), for the two-level bootstrap test above, if the difference seen is the true one "
        '(docs/statistics.md, "How many seeds an answer needs").'
    )
    lines = [heading, ""]
    return "\n".join(lines + [f"- {power_sentence(row)}" for row in table.itertuples()])
