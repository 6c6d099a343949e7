"""Time split conformal sets over bootstrap resamples: MAPIE once per resample against peftviz.calibration.conformal.

    .venv/bin/python benchmarks/conformal.py                      # N = 213 calibration and 213 evaluation, C = 5, R = 1000
    .venv/bin/python benchmarks/conformal.py --examples 2000 --resamples 200 --repeats 3

Data: probabilities p ~ Dirichlet(0.5, ..., 0.5) over C classes, labels drawn from p (seeded). Resample r
takes calibration rows `resample_indices(N, R, seed=1)` and evaluation rows `resample_indices(N, R, seed=0)`,
as `conformal_sets` does. The MAPIE side conformalizes a `SplitConformalClassifier(prefit=True)` around a
lookup estimator (X = row numbers, predict_proba returns the stored rows) on each calibration row and
predicts the sets of its evaluation row, at one α. LAC's draws are compared (the largest |difference| in
coverage and size is printed); MAPIE's APS draws U anew per call, so only its timing is comparable.
Each timing is the median of --repeats runs. Prints markdown.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the project's tests/ holds MAPIE's lookup estimator
from benchmarks.smooth_ece import median_seconds  # the smooth ECE benchmark's timing
from tests.support.mapie_reference import lookup


def make_data(n_examples: int, n_classes: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(n_classes, 0.5), size=2 * n_examples)  # (2N, C)
    labels = (probs.cumsum(axis=1) > rng.random((2 * n_examples, 1))).argmax(axis=1)
    return probs[:n_examples], labels[:n_examples], probs[n_examples:], labels[n_examples:]


def mapie_loop(cal_probs, cal_labels, eval_probs, eval_labels, alpha, score, n_resamples) -> np.ndarray:
    from mapie.classification import SplitConformalClassifier

    from peftviz.calibration.stats import resample_indices

    n_cal = len(cal_labels)
    estimator = lookup(np.vstack([cal_probs, eval_probs]))
    cal_rows, eval_rows = resample_indices(n_cal, n_resamples, 1), resample_indices(len(eval_labels), n_resamples, 0)
    params = {"include_last_label": "randomized"} if score == "aps" else None
    draws = []
    for cal_row, eval_row in zip(cal_rows, eval_rows):
        found = SplitConformalClassifier(
            estimator, confidence_level=1 - alpha, conformity_score=score, prefit=True, random_state=0
        )
        found.conformalize(cal_row[:, None], cal_labels[cal_row])
        sets = found.predict_set((n_cal + eval_row)[:, None], conformity_score_params=params)[1][:, :, 0]  # (N, C)
        draws.append((sets[np.arange(len(eval_row)), eval_labels[eval_row]].mean(), sets.sum(axis=1).mean()))
    return np.array(draws)  # (R, 2) coverage, mean size


def vectorized(cal_probs, cal_labels, eval_probs, eval_labels, alpha, score, n_resamples) -> np.ndarray:
    from peftviz.calibration.conformal import conformal_sets

    found = conformal_sets(cal_probs, cal_labels, eval_probs, eval_labels, alpha, score, n_resamples)
    return np.stack([found.coverage_draws, found.set_size_draws], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=213, help="N: calibration and evaluation examples each")
    parser.add_argument("--classes", type=int, default=5, help="C")
    parser.add_argument("--resamples", type=int, default=1000, help="R: rows")
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # MAPIE warns about prefit estimators' attributes once per call
    data = make_data(args.examples, args.classes)
    mapie_loop(*data, args.alpha, "lac", 1)  # import MAPIE and sklearn before timing
    print("| score | N | C | R | MAPIE loop ms | vectorized ms | MAPIE / vectorized | max abs difference |")
    print("|---|---|---|---|---|---|---|---|")
    for score in ("lac", "aps"):
        call = (*data, args.alpha, score, args.resamples)
        loop_s, want = median_seconds(mapie_loop, call, args.repeats)
        fast_s, got = median_seconds(vectorized, call, args.repeats)
        gap = f"{np.abs(want - got).max():.1e}" if score == "lac" else "(U differs)"
        print(
            f"| {score} | {args.examples} | {args.classes} | {args.resamples} | {loop_s * 1e3:.0f} | "
            f"{fast_s * 1e3:.1f} | {loop_s / fast_s:.0f} | {gap} |"
        )


if __name__ == "__main__":
    main()
