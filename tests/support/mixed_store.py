"""A store as a newcomer's becomes: single runs beside groups of 2 and 3 seeds, an imported run, two
datasets and two models. Tiny random encoders built from their config, a few dozen documents per
split and two epochs: the weights do not matter, only the store's shape (`mixed_store` in conftest).

    bbc-news, tiny-bert, limit 40   the smoke comparison at seed 0 (fine-tuning, prefix-tuning,
                                    kernel-prefix-propagation, tiny-attention 1H and 4H averaged:
                                    single runs), prefix-propagation at seeds 0, 1, 2 (a group of 3),
                                    LoRA at seeds 0, 1 (a group of 2), LoRA seed 0 exported and
                                    imported back (a single run, "lora (imported)")
    a CSV of 3 classes, tiny-roberta  prefix-propagation and BitFit at seed 0 (single runs), trained
                                    first, so the store's newest run is of the first split
    "tokens", a tiny BERT from config  recorded from other loops, before everything else: a LoRA trained by
                                    transformers' Trainer (PeftvizCallback, "trainer lora", 3 epochs) and a
                                    loop's own method at seeds 0, 1 (peftviz.record, "my-adapter", 2 epochs)
"""

from __future__ import annotations

from pathlib import Path

LIMIT, MAX_LENGTH, EPOCHS = 40, 24, 2  # documents per split, tokens per document, epochs: seconds per run
TOPICS = {  # the CSV's classes, each with its own words, so a document's class can be learned
    "sport": "the team won the match goal season coach player cup final league",
    "money": "the bank rates market shares profit prices trade loan fund growth",
    "film": "the actor movie director award screen cinema role script star festival",
}


def write_csv(path: Path, per_class: int = 30) -> Path:
    """A text,label CSV of `per_class` documents per topic, eight words each (seeded shuffles)."""
    import csv

    import numpy as np

    rng = np.random.default_rng(0)
    rows = [
        (" ".join(rng.choice(words.split(), 8)), label) for label, words in TOPICS.items() for _ in range(per_class)
    ]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def build(store: Path, scratch: Path) -> Path:
    """Train and import every run of the module docstring into `store`; `scratch` holds the CSV and the export."""
    import torch

    from peftviz.exchange.export import export_run
    from peftviz.exchange.imports import import_model
    from peftviz.exchange.request import ImportRequest
    from peftviz.run_config import over_seeds, preset_config
    from peftviz.sweep.variants import comparison_configs
    from tests.support.sweeps import trained

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster than two contending ones
    try:
        record_other_loops(store, scratch)
        sizes = {"limit": LIMIT, "max_length": MAX_LENGTH, "epochs": EPOCHS}
        other = {**sizes, "model": "tiny-roberta", "dataset": str(write_csv(scratch / "topics.csv"))}
        trained([preset_config("smoke", method, **other) for method in ("prefix-propagation", "bitfit")], store)
        trained(comparison_configs("smoke", **sizes), store)
        extra = [preset_config("smoke", "prefix-propagation", **sizes), preset_config("smoke", "lora", **sizes)]
        trained = trained(over_seeds(extra[:1], [1, 2]) + over_seeds(extra[1:], [0, 1]), store)
        lora = next(run for run in trained if run.config.method == "lora" and run.seed == 0)
        import_model(ImportRequest(str(export_run(lora, scratch / "exported"))), store)
    finally:
        torch.set_num_threads(threads)
    return store


def record_other_loops(store: Path, scratch: Path) -> None:
    """The runs of "tokens" (see the module docstring): one validation and one test split for all three."""
    import numpy as np

    from peftviz.integrations.transformers import PeftvizCallback
    from peftviz.record import open_run
    from tests.support.tiny_trainer import LABEL_NAMES, MODEL_NAME, tiny_trainer, token_split

    validation, test = token_split(30, seed=2), token_split(30, seed=3)
    callback = PeftvizCallback("trainer lora", dataset="tokens", runs_dir=store)
    tiny_trainer(scratch / "trainer", [callback], {"validation": validation, "test": test}).train()
    labels = {"validation": np.array(validation["labels"]), "test": np.array(test["labels"])}
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        logits = {split: rng.normal(size=(30, 3)) + 2 * np.eye(3)[y] for split, y in labels.items()}  # (30, 3)
        with open_run(
            "my-adapter",
            method="my-adapter",
            model=MODEL_NAME,
            dataset="tokens",
            label_names=LABEL_NAMES,
            settings={"seed": seed},
            runs_dir=store,
        ) as run:
            for epoch in (1, 2):
                run.add_epoch(
                    labels["validation"],
                    logits=logits["validation"] * epoch,
                    test_labels=labels["test"],
                    test_logits=logits["test"] * epoch,
                )
