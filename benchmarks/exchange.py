"""Time `export` and `import` of a LoRA run on the offline MiniLM, against loading the same adapter with peft.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/exchange.py --limit 200 --repeats 3

Setup (not timed): one LoRA run of the quick preset ("minilm" on bbc-news) with 1 epoch and --limit
documents per split, trained into a temporary store. Then, --repeats times, in this process:

- export: `export_run(run, folder)` into a new folder (a peft adapter folder plus peftviz.json);
- import: `import_model(ImportRequest(folder), store)`: loads the encoder, the adapter through
  peft, checks peftviz's logits against peft's on one batch, evaluates validation and test, and
  stores the run;
- peft baseline, what a user would run instead: `AutoModelForSequenceClassification.from_pretrained`
  of the MiniLM folder (num_labels=5), `PeftModel.from_pretrained` of the exported folder, the
  data loaded and tokenised as the run was (same limit, max_length and batch size), and softmax
  probabilities over validation and test under `torch.no_grad` in eval mode.

Wall seconds by `time.perf_counter`; the median row's import / peft is the ratio of the two medians.
Correctness: the max |Δ probability| between the imported run's stored test predictions and the
baseline's (the median row: the largest of the repeats). Prints the machine, each repeat, and the
medians as markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

from peftviz.data.loading import load_data
from peftviz.exchange.export import export_run
from peftviz.exchange.imports import SPLITS, import_model
from peftviz.exchange.request import ImportRequest
from peftviz.paths import minilm_path
from peftviz.run_config import preset_config
from peftviz.training.inference import make_loader, tokenize
from peftviz.training.trainer import train

PARTS = ("export", "import", "peft")


def timed(function, *args):
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


@torch.no_grad()
def peft_baseline(folder: Path, config) -> np.ndarray:
    """Test probabilities of the exported adapter loaded by peft itself (validation computed too)."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=5)
    model = PeftModel.from_pretrained(base, str(folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    data = load_data(config.dataset, seed=config.data_seed, limit=config.limit)
    probs = {}
    for split in SPLITS:
        examples = tokenize(data.splits[split], tokenizer, config.max_length)
        loader = make_loader(examples, config.batch_size, tokenizer.pad_token_id)
        logits = [model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits for b in loader]
        probs[split] = torch.cat(logits).float().softmax(-1).numpy()
    return probs["test"]


def one_repeat(run, work: Path, index: int) -> dict:
    folder = work / f"exported-{index}"
    export_s, _ = timed(export_run, run, folder)
    import_s, imported = timed(import_model, ImportRequest(str(folder)), work / "runs")
    peft_s, peft_probs = timed(peft_baseline, folder, run.config)
    gap = float(np.abs(imported.predictions("test")[0] - peft_probs).max())
    return {"export": export_s, "import": import_s, "peft": peft_s, "gap": gap}


def machine_line() -> str:
    import peft
    import transformers

    cpu = platform.processor() or platform.machine()
    return (
        f"{date.today().isoformat()}, {platform.node()}: {os.cpu_count()} cores ({cpu}), torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads, transformers {transformers.__version__}, peft "
        f"{peft.__version__}, no GPU used"
    )


def print_table(rows: list[dict], limit: int) -> None:
    median = {part: statistics.median(row[part] for row in rows) for part in PARTS}
    threads = torch.get_num_threads()
    print("| | export s | import s | peft baseline s | import / peft | max abs Δ prob. (test) | limit | threads |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in [*((f"repeat {i}", row) for i, row in enumerate(rows, 1)), (f"median of {len(rows)}", median)]:
        gap = max(r["gap"] for r in rows) if row is median else row["gap"]
        print(
            f"| {name} | {row['export']:.2f} | {row['import']:.2f} | {row['peft']:.2f} | "
            f"{row['import'] / row['peft']:.2f} | {gap:.1e} | {limit} | {threads} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="documents per split (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = preset_config("quick", "lora", limit=args.limit, epochs=1)
    with tempfile.TemporaryDirectory(prefix="peftviz-exchange-") as work:
        run = train(config, Path(work) / "runs")  # untimed: also imports torch, transformers and the data
        print(machine_line() + "\n", flush=True)
        rows = [one_repeat(run, Path(work), index) for index in range(1, args.repeats + 1)]
    print_table(rows, args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
