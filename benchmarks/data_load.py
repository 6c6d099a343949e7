"""Time peftviz.data.loading.load_data: the built-in bbc-news corpus cold and cached, and a hub dataset offline.

    .venv/bin/python benchmarks/data_load.py
    .venv/bin/python benchmarks/data_load.py --repeats 10

Measures, in one fresh process:
- bbc-news, first load: reads the 2225 files of the corpus, drops duplicates, splits;
- bbc-news, later loads (seed 0 again, then seed 1): the corpus is kept in memory, only the split is
  redone; median of --repeats;
- sst2 with the hub offline and empty caches (HF_HOME in a temporary folder): how long load_data takes
  to give up with its one-line DataError instead of waiting on the network.
tests/data/test_data.py checks what these do (a later load does not read the corpus again; the offline
failure is one DataError); this script says how long they take. Prints markdown; asserts nothing.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time


def seconds(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="cached loads to take the median of")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as home:
        # read when datasets and huggingface_hub are imported: set them before peftviz.data.loading imports those
        os.environ.update(HF_HOME=home, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        from peftviz.data.builtin import BUILTIN
        from peftviz.data.loading import load_data
        from peftviz.errors import DataError

        def offline_hub() -> None:
            try:
                load_data("sst2")
            except DataError:
                return
            sys.exit("sst2 loaded although the hub is offline and the caches are empty")

        print("| load | seconds |\n|---|---|")
        print(f"| bbc-news, first load (reads the corpus) | {seconds(lambda: load_data(BUILTIN, seed=0)):.4f} |")
        for seed in (0, 1):
            cached = statistics.median(
                seconds(lambda seed=seed: load_data(BUILTIN, seed=seed)) for _ in range(args.repeats)
            )
            print(f"| bbc-news seed {seed}, corpus in memory (median of {args.repeats}) | {cached:.4f} |")
        print(f"| sst2, hub offline, empty cache: until the DataError | {seconds(offline_hub):.4f} |")


if __name__ == "__main__":
    main()
