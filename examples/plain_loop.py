"""A linear probe on MiniLM trained by a bare PyTorch loop on bbc-news, each epoch's calibration recorded by peftviz.

    python examples/plain_loop.py                      # 3 epochs; the run goes to PEFTVIZ_RUNS (or cache/runs)
    python examples/plain_loop.py --limit 60 --epochs 3 --max-length 32 --runs-dir /tmp/runs   # what CI runs
    streamlit run app.py                               # the run beside peftviz's own, on every page

Any loop works the same way: open a run, hand it each epoch's validation (and test) labels and logits,
and leave the `with` block. "linear-probe" is not a peftviz method, so the run lists as
`external:linear-probe`; peftviz's own methods ("lora", "prefix-propagation", ...) keep their names.
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

from peftviz.data.loading import load_data
from peftviz.paths import minilm_path
from peftviz.record import open_run
from peftviz.store.runs import load_run

LEARNING_RATE, BATCH_SIZE = 5e-2, 16


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="examples per split (default: all)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128, help="tokens per document")
    parser.add_argument("--runs-dir", default=None, help="the run store (default: PEFTVIZ_RUNS or cache/runs)")
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def loaders(args: argparse.Namespace, tokenizer) -> tuple[dict[str, DataLoader], list[str]]:
    """A batch loader per split of bbc-news (train shuffled), and the label names."""
    data = load_data("bbc-news", limit=args.limit)
    splits = data.splits.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=args.max_length),
        batched=True,
        remove_columns=["text"],
    )
    collate = DataCollatorWithPadding(tokenizer)  # pads each batch; "label" becomes "labels"
    found = {
        name: DataLoader(split, BATCH_SIZE, shuffle=name == "train", collate_fn=collate)
        for name, split in splits.items()
    }
    return found, data.label_names


def probe(num_labels: int):
    """MiniLM, frozen, under a new linear head: only the head trains."""
    model = AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=num_labels)
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name.startswith("classifier.")
    return model


def train_epoch(model, loader: DataLoader, optimizer) -> float:
    """One pass over the training split; returns the mean training loss."""
    model.train()
    losses = []
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return sum(losses) / len(losses)


@torch.no_grad()
def evaluate(model, loader: DataLoader) -> tuple[torch.Tensor, torch.Tensor]:
    """The split's labels (N,) and logits (N, C), in the loader's order."""
    model.eval()
    labels, logits = [], []
    for batch in loader:
        labels.append(batch.pop("labels"))
        logits.append(model(**batch).logits)
    return torch.cat(labels), torch.cat(logits)


def main(argv: list[str] | None = None):
    """Train and record; returns the recorded run as the store reads it."""
    args = parse(argv)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    batches, label_names = loaders(args, tokenizer)
    model = probe(len(label_names))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
    settings = {
        "epochs": args.epochs,
        "learning_rate": args.learning_rate,
        "batch_size": BATCH_SIZE,
        "effective_batch_size": BATCH_SIZE,
        "seed": args.seed,
        "limit": args.limit,
        "max_length": args.max_length,
        "optimizer": "AdamW",
    }
    with open_run(
        "minilm-linear-probe",
        method="linear-probe",
        model="minilm",
        dataset="bbc-news",
        label_names=label_names,
        settings=settings,
        runs_dir=args.runs_dir,
    ) as run:
        for epoch in range(args.epochs):
            train_loss = train_epoch(model, batches["train"], optimizer)
            val_labels, val_logits = evaluate(model, batches["validation"])
            test_labels, test_logits = evaluate(model, batches["test"])
            line = run.add_epoch(
                val_labels,
                logits=val_logits,
                test_labels=test_labels,
                test_logits=test_logits,
                values={"train_loss": train_loss},
            )
            print(f"epoch {epoch + 1}: loss {train_loss:.3f}, accuracy {line['accuracy']:.3f}, ECE {line['ece']:.3f}")
    recorded = load_run(run.path)  # leaving the block closed the run: complete (an exception: incomplete)
    print(f"recorded {recorded.name}: {recorded.status}, {recorded.epochs_done} epochs, in {recorded.path}")
    return recorded


if __name__ == "__main__":
    main()
