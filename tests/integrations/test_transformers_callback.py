"""PeftvizCallback on a real transformers.Trainer (a tiny BERT from config): what it records, checked against
the Trainer's own `predict` and an ECE computed here with numpy, under each evaluation schedule."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers import TrainerCallback

from peftviz.integrations.transformers import PeftvizCallback
from peftviz.record import RecordError
from peftviz.store.runs import list_runs
from tests.support.newcomer_path import ROOT
from tests.support.tiny_trainer import LABEL_NAMES, tiny_bert, tiny_trainer, token_split


def numpy_ece(probs: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    """Top-label ECE on equal-width bins, written out: sum over bins of |accuracy - confidence| x share."""
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    return sum(
        abs(correct[which == b].mean() - confidence[which == b].mean()) * (which == b).mean()
        for b in range(bins)
        if (which == b).any()
    )


def predicted(trainer, split) -> tuple[np.ndarray, np.ndarray]:
    out = trainer.predict(split)
    return torch.from_numpy(out.predictions).float().softmax(-1).numpy(), out.label_ids


def test_each_epoch_is_the_trainers_own_evaluation(tmp_path):
    validation, test = token_split(31, seed=2), token_split(23, seed=3)  # 31, 23: a short last eval batch
    trainer = tiny_trainer(
        tmp_path / "out",
        [PeftvizCallback(dataset="tokens", runs_dir=tmp_path / "runs")],
        {"validation": validation, "test": test},
    )
    trainer.train()
    [run] = list_runs(tmp_path / "runs")
    assert (run.status, len(run.metrics), run.config.epochs) == ("complete", 3, 3)
    assert (run.config.method, run.method_config.r, run.method_config.target_modules) == ("lora", 4, "query,value")
    assert (run.label_names, run.config.dataset, run.recorded["by"]) == (LABEL_NAMES, "tokens", "transformers-trainer")
    assert (run.config.learning_rate, run.config.batch_size, run.config.seed) == (1e-2, 8, 0)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    assert run.parameters["trainable"] == trainable < run.parameters["total"]
    assert [line["step"] for line in run.metrics] == [8, 16, 24]
    # the last evaluation is the final model's: trainer.predict gives the same probabilities and ECE
    for split, stored in ((validation, 3), (test, "epoch_3_test")):
        probs, labels = predicted(trainer, split)
        stored_probs, stored_labels = run.predictions(stored)
        assert np.abs(stored_probs - probs).max() < 1e-6 and (stored_labels == labels).all()
    probs, labels = predicted(trainer, validation)
    assert run.metrics[-1]["ece"] == pytest.approx(numpy_ece(probs, labels), abs=1e-6)
    assert run.metrics[-1]["accuracy"] == pytest.approx((probs.argmax(1) == labels).mean())
    # the run's test split is its best epoch's (highest validation accuracy, first of ties)
    best_probs, _ = run.predictions(f"epoch_{run.best_epoch}_test")
    assert np.array_equal(run.predictions("test")[0], best_probs)
    assert run.summary["test"]["ece"] == pytest.approx(numpy_ece(best_probs, np.array(test["labels"])), abs=1e-6)
    # epochs differ: the probabilities are recorded anew each evaluation
    assert np.abs(run.predictions(1)[0] - run.predictions(3)[0]).max() > 1e-3


def test_with_eval_steps_each_evaluation_is_a_point(tmp_path):
    callback = PeftvizCallback(dataset="tokens", runs_dir=tmp_path / "runs")
    trainer = tiny_trainer(
        tmp_path / "out",
        [callback],
        token_split(20, seed=2),
        eval_strategy="steps",
        eval_steps=4,
        max_steps=12,
        logging_steps=2,
    )
    trainer.train()
    [run] = list_runs(tmp_path / "runs")
    assert (run.status, run.config.epochs) == ("complete", 3)
    assert [(line["epoch"], line["step"]) for line in run.metrics] == [(1, 4), (2, 8), (3, 12)]
    assert all(np.isfinite(line["train_loss"]) for line in run.metrics)
    assert "test" not in run.summary  # a single eval dataset is the validation split
    probs, labels = predicted(trainer, trainer.eval_dataset)
    assert run.metrics[-1]["ece"] == pytest.approx(numpy_ece(probs, labels), abs=1e-6)


def test_what_the_model_is_names_the_method(tmp_path):
    plain = tiny_trainer(
        tmp_path / "plain",
        [PeftvizCallback(runs_dir=tmp_path / "runs")],
        token_split(10, seed=2),
        model=tiny_bert(lora=False),
        num_train_epochs=1,
    )
    plain.train()
    given = PeftvizCallback("mine", method="my-method", settings={"note": "warm restarts"}, runs_dir=tmp_path / "runs")
    tiny_trainer(tmp_path / "own", [given], token_split(10, seed=2), num_train_epochs=1).train()
    runs = {run.label: run for run in list_runs(tmp_path / "runs")}
    fine_tuned = runs["fine-tuning"]
    assert fine_tuned.parameters["trainable"] == fine_tuned.parameters["total"]
    assert runs["mine"].config.method == "external:my-method"
    assert runs["mine"].recorded["settings"]["note"] == "warm restarts"
    assert runs["mine"].group_key != fine_tuned.group_key


class StopAfterFirstEvaluation(TrainerCallback):
    def on_evaluate(self, args, state, control, **kwargs):
        raise KeyboardInterrupt("stopped by the user")


def test_an_interrupted_train_leaves_its_epochs_and_the_next_train_a_new_run(tmp_path):
    callback = PeftvizCallback(dataset="tokens", runs_dir=tmp_path / "runs")
    trainer = tiny_trainer(tmp_path / "out", [callback, StopAfterFirstEvaluation()], token_split(10, seed=2))
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    trainer.remove_callback(StopAfterFirstEvaluation)
    trainer.train()
    first, second = list_runs(tmp_path / "runs")
    assert (first.status, len(first.metrics)) == ("incomplete", 1)
    assert (second.status, len(second.metrics)) == ("complete", 3)


def test_an_eval_dataset_without_labels_is_one_line_and_the_run_keeps_nothing_wrong(tmp_path):
    trainer = tiny_trainer(
        tmp_path / "out", [PeftvizCallback(runs_dir=tmp_path / "runs")], token_split(10, seed=2, labelled=False)
    )
    with pytest.raises(RecordError, match="evaluated without labels: the eval dataset needs a label column") as err:
        trainer.train()
    [run] = list_runs(tmp_path / "runs")  # failed with the line, not left incomplete (issue 45)
    assert (run.status, run.error, run.metrics) == ("failed", str(err.value), [])


@pytest.mark.slow
def test_under_two_processes_one_run_holds_every_example_in_order(tmp_path):
    """torchrun, 2 CPU processes (gloo): each evaluates half the batches; the run holds the gathered whole."""
    script = tmp_path / "ddp.py"
    script.write_text(
        textwrap.dedent(f"""
        import numpy as np, torch
        from peftviz.integrations.transformers import PeftvizCallback
        from tests.support.tiny_trainer import tiny_trainer, token_split
        validation = token_split(31, seed=2)
        trainer = tiny_trainer({str(tmp_path / "out")!r}, [PeftvizCallback(runs_dir={str(tmp_path / "runs")!r})],
                               validation, num_train_epochs=2, ddp_backend="gloo", per_device_eval_batch_size=4)
        trainer.train()
        out = trainer.predict(validation)
        if trainer.is_world_process_zero():
            np.savez({str(tmp_path / "predict.npz")!r}, logits=out.predictions, labels=out.label_ids)
    """)
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=_offline_env())
    assert done.returncode == 0, done.stderr[:3000]
    [run] = list_runs(tmp_path / "runs")
    assert (run.status, len(run.metrics), run.record["environment"]["processes"]) == ("complete", 2, 2)
    gathered = np.load(tmp_path / "predict.npz")
    probs, labels = run.predictions(2)
    assert probs.shape == (31, 3) and (labels == gathered["labels"]).all()
    assert np.abs(probs - torch.from_numpy(gathered["logits"]).softmax(-1).numpy()).max() < 1e-6


def _offline_env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
