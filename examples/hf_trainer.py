"""A LoRA on MiniLM trained with the Hugging Face `Trainer` on bbc-news, its calibration recorded by peftviz.

    python examples/hf_trainer.py                      # 3 epochs; the run goes to PEFTVIZ_RUNS (or cache/runs)
    python examples/hf_trainer.py --limit 60 --epochs 3 --max-length 32 --runs-dir /tmp/runs   # what CI runs
    streamlit run app.py                               # the run beside peftviz's own, on every page

An ordinary Trainer script: the three lines marked `# peftviz:` are all it takes to record each epoch's
validation and test predictions into the run store.
"""

from __future__ import annotations

import argparse
import tempfile

from peft import LoraConfig, get_peft_model
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

from peftviz.data.loading import load_data
from peftviz.integrations.transformers import PeftvizCallback  # peftviz: 1. import the callback
from peftviz.paths import minilm_path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="examples per split (default: all)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128, help="tokens per document")
    parser.add_argument("--runs-dir", default=None, help="the run store (default: PEFTVIZ_RUNS or cache/runs)")
    parser.add_argument("--output-dir", default=None, help="the Trainer's folder (default: a new temporary one)")
    parser.add_argument("--report-to", default="none", help='the Trainer\'s trackers: "none", "tensorboard", ...')
    parser.add_argument("--learning-rate", type=float, default=2e-2)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def tokenized(args: argparse.Namespace, tokenizer):
    """bbc-news's train, validation and test splits as token ids with a "label" column."""
    data = load_data("bbc-news", limit=args.limit)
    splits = data.splits.map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=args.max_length),
        batched=True,
        remove_columns=["text"],
    )
    return splits, data.label_names


def lora_model(label_names: list[str]):
    """MiniLM with a new classification head, LoRA on its query and value maps."""
    model = AutoModelForSequenceClassification.from_pretrained(
        minilm_path(),
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),  # the callback takes the run's label names from here
        label2id={name: i for i, name in enumerate(label_names)},
    )
    return get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=8, target_modules=["query", "value"]))


def main(argv: list[str] | None = None):
    """Train, record, and return (the trainer, the recorded run, the tokenized splits)."""
    args = parse(argv)
    set_seed(args.seed)  # the head's initial weights
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    splits, label_names = tokenized(args, tokenizer)
    training = TrainingArguments(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="peftviz-hf-trainer-"),
        num_train_epochs=args.epochs,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        eval_strategy="epoch",  # one point of the run per evaluation: here, per epoch
        save_strategy="no",
        logging_steps=5,
        report_to=args.report_to,
        seed=args.seed,
    )
    # the data as peftviz names it: the run then compares with peftviz's own MiniLM runs on the same split
    recorded_as = {
        "dataset": "bbc-news",
        "model": "minilm",
        "settings": {"limit": args.limit, "max_length": args.max_length},
    }
    callback = PeftvizCallback("minilm-lora", runs_dir=args.runs_dir, **recorded_as)
    trainer = Trainer(
        model=lora_model(label_names),
        args=training,
        train_dataset=splits["train"],
        eval_dataset={"validation": splits["validation"], "test": splits["test"]},  # peftviz: 2. name the splits
        data_collator=DataCollatorWithPadding(tokenizer),
        callbacks=[callback],  # peftviz: 3. add the callback
    )
    trainer.train()
    run = callback.run
    print(f"recorded {run.name}: {run.status}, {run.epochs_done} epochs, in {run.path}")
    return trainer, run, splits


if __name__ == "__main__":
    main()
