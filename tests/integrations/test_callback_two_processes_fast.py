"""PeftvizCallback under two processes, simulated in one: what a data-parallel Trainer records, without launching
processes (the slow test_transformers_callback.py launches two under torchrun).

- The effective batch size a run records counts every process: per-device batch × gradient accumulation × processes.
  The callback reads the processes as the Trainer's arguments give them (`TrainingArguments.world_size`: its
  accelerate `PartialState`'s `num_processes`), so a two-process state stands in for the launch's.
- An evaluation's predictions, gathered from both processes, are every example in the dataset's order. Each process
  evaluates the shard accelerate deals it (`BatchSamplerShard`: batch i to process i mod 2, the last round padded from
  the start), and `torch.distributed.all_gather_object` runs between two threads, one per process.
"""

from __future__ import annotations

import pickle
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from accelerate.utils import DistributedType
from torch.utils.data import BatchSampler, SequentialSampler
from transformers import TrainerControl, TrainerState, TrainingArguments

from peftviz.integrations.transformers import PeftvizCallback
from peftviz.store.runs import list_runs
from tests.support.tiny_trainer import tiny_bert

PROCESSES = 2


def two_process_state():
    """What `TrainingArguments.distributed_state` holds on rank 0 of a two-process CPU launch (an accelerate
    `PartialState`), as far as the arguments read it."""
    return SimpleNamespace(
        num_processes=PROCESSES,
        process_index=0,
        local_process_index=0,
        is_main_process=True,
        is_local_main_process=True,
        device=torch.device("cpu"),
        distributed_type=DistributedType.MULTI_CPU,
    )


def recorded_run(tmp_path, processes: int):
    """The run the callback opens when training starts: per-device batch 4, gradient accumulation 3."""
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=3,
        num_train_epochs=2,
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    assert args.device.type == "cpu"  # the arguments set up their (one) process first
    if processes > 1:
        args.distributed_state = two_process_state()
    assert args.world_size == processes
    callback = PeftvizCallback(dataset="tokens", runs_dir=tmp_path / "runs")
    callback.on_train_begin(args, TrainerState(), TrainerControl(), model=tiny_bert(lora=False))
    callback._end(abandon=True)  # as a killed run: the run keeps what it recorded when it opened
    [run] = list_runs(tmp_path / "runs")
    return run


def test_a_recorded_run_s_effective_batch_is_batch_times_accumulation_times_two_processes(tmp_path):
    run = recorded_run(tmp_path, PROCESSES)
    assert (run.config.batch_size, run.record["environment"]["processes"]) == (4, 2)
    assert run.config.effective_batch_size == 4 * 3 * 2


def test_a_recorded_run_s_effective_batch_in_one_process_is_batch_times_accumulation(tmp_path):
    run = recorded_run(tmp_path, 1)
    assert (run.config.effective_batch_size, run.record["environment"]["processes"]) == (4 * 3, 1)


class ThreadGroup:
    """`torch.distributed` of `size` processes, each a thread: `all_gather_object` hands every process every
    process's object (pickled, as between processes), by rank."""

    def __init__(self, size: int):
        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size, timeout=30)
        self.local = threading.local()

    def all_gather_object(self, out: list, obj, group=None) -> None:
        self.slots[self.local.rank] = pickle.dumps(obj)
        self.barrier.wait()
        out[:] = [pickle.loads(data) for data in self.slots]
        self.barrier.wait()  # every process has read the slots before any writes the next gather's


def shards(size: int, batch: int) -> list[list[list[int]]]:
    """The examples of each process's eval batches, as accelerate deals a prepared eval loader's batches."""
    batches = BatchSampler(SequentialSampler(range(size)), batch, drop_last=False)
    return [
        list(BatchSamplerShard(batches, PROCESSES, rank, split_batches=False, even_batches=True))
        for rank in range(PROCESSES)
    ]


# 31: a short last batch padded from the start; 32: even rounds; 9: the last round padded from the start; 3: fewer
# examples than one round
@pytest.mark.parametrize("size", [31, 32, 9, 3])
def test_every_example_of_a_two_process_evaluation_is_gathered_once_in_dataset_order(size, monkeypatch):
    logits = torch.randn(size, 3, generator=torch.Generator().manual_seed(size))  # (N, C): each example its own row
    labels = torch.arange(size) % 3  # (N,)
    group = ThreadGroup(PROCESSES)
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: PROCESSES)
    monkeypatch.setattr(torch.distributed, "all_gather_object", group.all_gather_object)
    loader = SimpleNamespace(dataset=list(range(size)))  # the prepared eval loader: its dataset is the whole split
    gathered, failures = [None] * PROCESSES, []

    def evaluate(rank: int, examples: list[list[int]]) -> None:
        group.local.rank = rank
        try:
            callback = PeftvizCallback(runs_dir="unused")
            model = SimpleNamespace(training=False)  # the model in eval mode, as the Trainer evaluates
            with torch.no_grad():
                for batch in examples:  # the forward hook's view of each of this process's eval forwards
                    index = torch.tensor(batch)
                    callback._capture(model, (), {"labels": labels[index]}, {"logits": logits[index]})
            gathered[rank] = callback._gathered(loader)
        except BaseException as err:  # noqa: BLE001  (a process's failure: the test reports it after the join)
            failures.append(err)
            group.barrier.abort()

    threads = [threading.Thread(target=evaluate, args=(rank, shard)) for rank, shard in enumerate(shards(size, 4))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    for rank, (got_labels, got_logits) in enumerate(gathered):  # every process holds the whole evaluation
        assert got_labels.tolist() == labels.tolist(), f"process {rank}"
        assert np.array_equal(got_logits, logits.numpy()), f"process {rank}"
