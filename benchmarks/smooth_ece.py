"""Time smooth ECE over bootstrap resamples: one relplot.smECE call per row against peftviz.smooth_ece.

    .venv/bin/python benchmarks/smooth_ece.py                      # R = 1000 at N = 213 and 2000
    .venv/bin/python benchmarks/smooth_ece.py --sizes 500 --resamples 200 --repeats 5
    OPENBLAS_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/smooth_ece.py   # one core

Data: confidences c ~ U(0.2, 1), correct h ~ Bernoulli(c^1.3) (somewhat overconfident, seeded),
rows of `peftviz.calibration.stats.resample_indices(N, R)`. Each timing is the median of --repeats runs; both
sides compute the same R values (checked: the largest |difference| is printed). Prints markdown.
"""

import argparse
import statistics
import time

import numpy as np


def make_data(n_examples: int, n_resamples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from peftviz.calibration.stats import resample_indices

    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.2, 1.0, n_examples)
    correct = (rng.random(n_examples) < confidence**1.3).astype(np.float64)
    return confidence, correct, resample_indices(n_examples, n_resamples, seed=0)


def relplot_loop(confidence, correct, indices) -> np.ndarray:
    from relplot import smECE

    return np.array([smECE(confidence[row], correct[row]) for row in indices])


def batched(confidence, correct, indices) -> np.ndarray:
    from peftviz.calibration.smooth_ece import resampled_smooth_ece

    return resampled_smooth_ece(confidence, correct, indices)[0]


def median_seconds(function, args, repeats: int) -> tuple[float, np.ndarray]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        values = function(*args)
        times.append(time.perf_counter() - started)
    return statistics.median(times), values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[213, 2000], help="N: examples per set")
    parser.add_argument("--resamples", type=int, default=1000, help="R: rows")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    relplot_loop(*make_data(10, 1))  # import relplot (matplotlib, seaborn) before timing
    print("| N | R | relplot loop ms | batched ms | relplot / batched | max abs difference |")
    print("|---|---|---|---|---|---|")
    for n_examples in args.sizes:
        data = make_data(n_examples, args.resamples)
        loop_s, want = median_seconds(relplot_loop, data, args.repeats)
        batched_s, got = median_seconds(batched, data, args.repeats)
        print(
            f"| {n_examples} | {args.resamples} | {1000 * loop_s:.0f} | {1000 * batched_s:.0f} | "
            f"{loop_s / batched_s:.1f} | {np.max(np.abs(got - want)):.1e} |"
        )


if __name__ == "__main__":
    main()
