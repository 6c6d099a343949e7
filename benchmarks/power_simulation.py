"""Does a plan's design reach its power? Each scenario's recommended design, run through the real test.

    .venv/bin/python benchmarks/power_simulation.py [--experiments 1000]

Each scenario sets known variance components (per seed, the test set's shared part, seed × document) and a true
difference; `power.recommend` plans the fewest seeds on the scenario's documents, or documents at 3 seeds, or
seeds on five times the documents, for 80% power; `power.simulated_power` then simulates that many comparisons
of seeds × documents with those components and counts how often `stats.two_level_difference` (what `report`
runs, 1,000 resamples) calls the difference significant. It prints, per scenario and design, the planned and
the achieved power with its binomial standard error. docs/statistics.md ("How many seeds an answer needs")
holds the output; tests/calibration/test_power.py asserts the same within ±5 points.
"""

import argparse
import math
import time

from peftviz.calibration.power import VarianceComponents, power, recommend, simulated_power

# name -> (components, difference, alpha per pair)
SCENARIOS = {
    "seeds vary most (α 0.05, one pair)": (VarianceComponents(1e-4, 4e-6, 1.6e-5, 200, 3), 0.01, 0.05),
    "the test set varies most (α 0.05 / 15 pairs)": (VarianceComponents(2e-6, 4e-5, 1e-5, 213, 3), 0.01, 0.05 / 15),
    "both (α 0.05 / 15 pairs)": (VarianceComponents(4e-5, 1e-5, 2e-5, 213, 3), 0.01, 0.05 / 15),
}


def designs(parts: VarianceComponents, difference: float, alpha: float) -> list[tuple[str, int, int]]:
    """The plan's designs: (what, seeds, documents), where the plan found one."""
    plan = recommend(parts, difference, alpha)
    found = [("the pilot", parts.n_seeds, parts.n_documents)]
    if plan.seeds:
        found.append(("seeds on the pilot's documents", plan.seeds, parts.n_documents))
    if plan.documents:
        found.append(("documents at the pilot's seeds", parts.n_seeds, plan.documents))
    if plan.seeds_with_more_documents[5]:
        found.append(("seeds on 5x the documents", plan.seeds_with_more_documents[5], 5 * parts.n_documents))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    args = parser.parse_args()
    print("| scenario | design | seeds | documents | planned power | achieved power (± s.e.) |")
    print("|---|---|---|---|---|---|")
    for name, (parts, difference, alpha) in SCENARIOS.items():
        for what, seeds, documents in designs(parts, difference, alpha):
            start = time.perf_counter()
            planned = power(parts, difference, seeds, documents, alpha)
            achieved = simulated_power(parts, difference, seeds, documents, alpha, args.experiments)
            error = math.sqrt(achieved * (1 - achieved) / args.experiments)
            print(
                f"| {name} | {what} | {seeds} | {documents:,} | {planned:.3f} | {achieved:.3f} ± {error:.3f} |"
                f" <!-- {time.perf_counter() - start:.1f} s -->"
            )


if __name__ == "__main__":
    main()
