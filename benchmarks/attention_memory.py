"""Peak extra memory of the Attention page drawing one long document, measured on the page itself.

    .venv/bin/python benchmarks/attention_memory.py RUN_FOLDER

RUN_FOLDER is a trained run (e.g. prefix-propagation from `python -m peftviz compare --preset
quick-long`). The script copies it into a store of its own, renders pages/3_Attention.py with
Streamlit's AppTest on the first validation document (model loaded, caches warm), then resets the
process's peak-RSS counter (Linux: /proc/self/clear_refs) and renders the page again on the
longest bbc-news article pasted as "your own text", truncated to the run's max_length as the
page does. It prints the document's token count and the new peak RSS above the RSS before that
render: the memory the page needs for the document's attention, its analyses and figures.
Linux only.
"""

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "pages" / "3_Attention.py"


def status_kib(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak resident set size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    args = parser.parse_args()
    store = Path(tempfile.mkdtemp(prefix="attention-memory-"))
    shutil.copytree(args.run, store / args.run.name)
    os.environ["PEFTVIZ_RUNS"] = str(store)

    from streamlit.testing.v1 import AppTest

    from peftviz.data.loading import load_data
    from peftviz.store.runs import load_run
    from peftviz.training.inference import load_trained

    run = load_run(store / args.run.name)
    texts = [text for split in load_data("bbc-news").splits.values() for text in split["text"]]
    longest = max(texts, key=len)
    _, tokenizer = load_trained(run, device="cpu")
    n_tokens = len(tokenizer(longest, truncation=True, max_length=run.config["max_length"])["input_ids"])

    app = AppTest.from_file(str(PAGE), default_timeout=600)
    app.run()  # first document: loads the model, fills the caches
    if app.exception:
        sys.exit(f"the page raised: {app.exception[0].message}")
    before = status_kib("VmRSS")
    reset_peak()
    app.radio[0].set_value("your own text").run()  # an empty text area: nothing drawn yet
    app.text_area[0].input(longest).run()
    peak = status_kib("VmHWM")
    if app.exception:
        sys.exit(f"the page raised: {app.exception[0].message}")
    caption = next(c.value for c in app.caption if "tokens (max_length" in c.value)
    print(f"run: {run.label} ({run.config['model']}), the longest bbc-news article: {n_tokens} tokens")
    print(f"page caption: {caption}")
    print(f"peak extra memory: {(peak - before) / 1024:.0f} MiB (RSS before {before / 1024:.0f} MiB)")
    shutil.rmtree(store)


if __name__ == "__main__":
    main()
