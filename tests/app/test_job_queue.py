"""The training queue (peftviz.app.jobs), the server's policy (peftviz.app.policy), and both on the pages.

A shared server must refuse server paths and hub ids from the browser without reading anything
(the tests watch the file system while the page runs), keep every visitor's jobs to themselves,
and never drop a Train press; a single-user server must never drop one either.
"""

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.app import worker
from peftviz.app.jobs import JobQueue, QueueFull
from peftviz.app.policy import DATASET_REFUSED, ServerPolicy, visitor_key
from peftviz.data.uploads import store_upload
from peftviz.errors import ConfigError, DataError
from peftviz.sweep.variants import comparison_configs
from tests.support.job_helpers import Gate, fake_queue, wait_until_idle

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PAGE = str(ROOT / "pages" / "1_Train.py")
CONFIGS = comparison_configs("smoke")[:1]


def seeded(seed: int) -> list:
    """CONFIGS at another training seed: jobs of other runs (the same runs twice are one job, a double click)."""
    return [replace(CONFIGS[0], seed=seed)]


def wait_for(condition, seconds: float = 10) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.01)
    assert condition()


# ------------------------------------------------------------------------------------- the queue


def test_jobs_wait_in_line_and_run_in_turn():
    gate = Gate()
    queue = JobQueue(max_running=1, train=gate)
    first, second, third = (queue.submit(seeded(i), Path("."), owner=owner) for i, owner in enumerate("abc"))
    wait_for(lambda: gate.started == [first.id])
    assert [job.status for job in (first, second, third)] == ["running", "waiting", "waiting"]
    assert [queue.place(job) for job in (first, second, third)] == [0, 1, 2]
    gate.release.set()
    wait_until_idle(queue)
    assert gate.started == [first.id, second.id, third.id] and {job.status for job in queue.jobs} == {"done"}


def test_as_many_jobs_run_at_once_as_the_server_allows():
    gate = Gate()
    queue = JobQueue(max_running=2, train=gate)
    jobs = [queue.submit(seeded(i), Path("."), owner="a") for i in range(3)]
    wait_for(lambda: len(gate.started) == 2)
    time.sleep(0.1)  # a third would have started by now
    assert [job.status for job in jobs] == ["running", "running", "waiting"]
    gate.release.set()
    wait_until_idle(queue)


def test_a_refused_job_says_why():
    gate = Gate()
    queue = JobQueue(max_running=1, max_waiting=2, per_owner=2, train=gate)
    queue.submit(seeded(0), Path("."), owner="a")
    queue.submit(seeded(1), Path("."), owner="a")
    with pytest.raises(QueueFull, match="you already have 2 job"):
        queue.submit(seeded(2), Path("."), owner="a")
    queue.submit(seeded(3), Path("."), owner="b")
    with pytest.raises(QueueFull, match="2 jobs are already waiting"):
        queue.submit(seeded(4), Path("."), owner="c")
    assert len(queue.jobs) == 3
    gate.release.set()
    wait_until_idle(queue)


def test_cancelling_a_waiting_job_takes_it_out_of_line():
    gate = Gate()
    queue = JobQueue(train=gate)
    first, second = queue.submit(seeded(0), Path(".")), queue.submit(seeded(1), Path("."))
    queue.cancel(second)
    assert second.status == "cancelled" and queue.waiting() == []
    gate.release.set()
    wait_until_idle(queue)
    assert gate.started == [first.id]


def test_cancelling_a_running_job_stops_its_training_process(monkeypatch):
    monkeypatch.setattr(worker, "COMMAND", [sys.executable, "-c", "import time; time.sleep(60)"])
    queue = JobQueue()  # the real trainer: a child process, here one that never answers
    job = queue.submit(CONFIGS, Path("."))
    wait_for(lambda: job.stop is not None)
    child = job.stop.__self__  # the Popen whose terminate() the job was handed
    queue.cancel(job)
    wait_until_idle(queue, 30)  # the child would otherwise sleep 60 s
    assert job.status == "cancelled" and job.error == "" and child.returncode == -signal.SIGTERM


def test_a_failed_job_keeps_its_error_and_the_next_one_runs():
    def train(job):
        if job.owner == "a":
            raise DataError("dataset 'x.csv' has no 'label' column")
        return []

    queue = JobQueue(train=train)
    failed, next_job = queue.submit(CONFIGS, Path("."), owner="a"), queue.submit(CONFIGS, Path("."), owner="b")
    wait_until_idle(queue)
    assert (failed.status, next_job.status) == ("failed", "done")
    assert failed.error == "DataError: dataset 'x.csv' has no 'label' column"


def test_a_run_is_queued_to_resume_once(smoke_store):
    from peftviz.store.runs import list_runs

    gate = Gate()
    queue = JobQueue(train=gate)
    run = list_runs(smoke_store)[0]
    queue.submit([], smoke_store, resume=(run,))
    with pytest.raises(QueueFull, match=f"run {run.name} is already queued to resume"):
        queue.submit([], smoke_store, resume=(run,))
    gate.release.set()
    wait_until_idle(queue)


# ------------------------------------------------------------------------------------ the policy


def test_a_browser_keeps_its_identity_across_reloads():
    # the same XSRF token under two masks (two page loads of one browser), and another browser's
    reload_1 = "2|47fdf39b|54f1edfe21e9a4767b72414c54dabedf|1795531435"
    reload_2 = "2|962c5970|85204715f0380e9daaa3eba7850b1434|1795531435"
    other = "2|2b9ca26e|ad6e740ea84195b94e03dde46a20dde2|1795531442"
    assert visitor_key(reload_1, "s1") == visitor_key(reload_2, "s2") != visitor_key(other, "s1")
    assert visitor_key(reload_1, "s1").startswith("browser-")
    for cookie in (None, "", "garbage", "2|zz|54f1|1", "1|47fdf39b|54f1edfe|1"):
        assert visitor_key(cookie, "s1") == "session-s1"


def test_the_policy_comes_from_the_environment(monkeypatch):
    for name in ("PEFTVIZ_SHARED", "PEFTVIZ_JOBS", "PEFTVIZ_QUEUE", "PEFTVIZ_JOBS_PER_VISITOR", "PEFTVIZ_UPLOAD_MB"):
        monkeypatch.delenv(name, raising=False)
    single = ServerPolicy.from_env()
    assert (single.shared, single.max_running, single.per_visitor, single.upload_limit) == (False, 1, None, 512 * 2**20)
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("PEFTVIZ_JOBS", "3")
    shared = ServerPolicy.from_env()
    assert (shared.shared, shared.max_running, shared.per_visitor, shared.upload_limit) == (True, 3, 2, 25 * 2**20)
    monkeypatch.setenv("PEFTVIZ_JOBS", "many")
    with pytest.raises(ConfigError, match="PEFTVIZ_JOBS='many': expected a whole number of at least 1"):
        ServerPolicy.from_env()


def test_a_shared_server_takes_uploads_only_up_to_its_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path))
    limit = ServerPolicy(shared=True, upload_limit=1000).upload_limit
    with pytest.raises(DataError, match=r"upload 'big.csv' is 0.0 MB; the limit is 0.000953674 MB"):
        store_upload("big.csv", b"x" * 1001, limit)
    assert not (tmp_path / ".uploads").exists()
    assert store_upload("ok.csv", b"text,label\na,b\n", limit).is_file()


def test_a_shared_server_decides_from_the_name_alone(tmp_path):
    policy, uploads = ServerPolicy(shared=True), tmp_path / ".uploads"
    policy.check_dataset("bbc-news", "bbc-news", uploads)
    policy.check_dataset(str(uploads / "0123456789abcdef.csv"), "bbc-news", uploads)
    for spec in ("/etc", str(uploads / "../x.csv"), str(uploads / "notahash.csv"), "sst2", "data.csv"):
        with pytest.raises(DataError) as refused:
            policy.check_dataset(spec, "bbc-news", uploads)
        assert str(refused.value) == DATASET_REFUSED
    policy.check_model("tiny-bert", [])
    policy.check_model("/owner/models/mine", ["/owner/models/mine"])  # a model the store's runs were trained on
    ServerPolicy(shared=False).check_model("/anything", [])


# ----------------------------------------------------------------------------------- on the page


@contextlib.contextmanager
def watching(root: Path, monkeypatch):
    """Every stat, open and listing of a path under `root` while the block runs."""
    touched, marker = [], str(root)

    def note(path) -> None:
        if isinstance(path, (str, bytes, os.PathLike)) and marker in os.fsdecode(path):  # not a file descriptor
            touched.append(os.fsdecode(path))

    def audit(event, args):
        if watching.on and event in ("open", "os.listdir", "os.scandir") and args:
            note(args[0])

    if not getattr(watching, "hooked", False):
        sys.addaudithook(lambda event, args: watching.audit(event, args))  # hooks cannot be removed: one, switched
        watching.hooked = True
    watching.audit, watching.on = audit, True
    for name in ("stat", "lstat"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda path, *a, _real=real, **k: (note(path), _real(path, *a, **k))[1])
    try:
        yield touched
    finally:
        watching.on = False


def typed_train(source: str, value: str) -> AppTest:
    """The Train page (smoke preset) with `value` typed as the dataset path ("path") or the model ("model")."""
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    if source == "path":
        at.radio[0].set_value("local path").run()
        at.text_input[0].set_value(value).run()
    else:
        at.text_input[0].set_value(value).run()
    at.button[0].click().run()
    return at


@pytest.mark.parametrize("source", ["model"])  # a shared server offers no path field: test_shared_paths.py
def test_a_shared_server_refuses_server_paths_alike_whether_they_exist_and_reads_none(
    empty_store, tmp_path, monkeypatch, source
):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    queue = fake_queue(monkeypatch, visitor=None)
    probe = tmp_path / "probe-secrets"
    (probe / "exists" / "sport").mkdir(parents=True)
    (probe / "exists" / "sport" / "a.txt").write_text("a document")
    (probe / "exists" / "config.json").write_text("{}")
    answers = {}
    with watching(probe, monkeypatch) as touched:
        for name in ("exists", "missing"):
            at = typed_train(source, str(probe / name))
            assert not at.exception
            answers[name] = [error.value for error in at.error]
    assert touched == []  # nothing under the probe was opened, listed or even looked up
    assert answers["exists"] == answers["missing"] and len(answers["exists"]) == 1
    assert "this server is shared" in answers["exists"][0] and str(probe) not in answers["exists"][0]
    assert queue.jobs == []


def test_a_shared_server_refuses_a_hub_id_at_once(empty_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # were it asked, the hub would be tried (and retried)
    queue = fake_queue(monkeypatch, visitor=None)
    asked = []  # what would reach the hub: a model checked or loaded, data loaded
    for name in ("check_model", "load_encoder"):
        monkeypatch.setattr(f"peftviz.modeling.backbones.{name}", lambda *args, **kwargs: asked.append(args))
    monkeypatch.setattr("peftviz.data.loading.load_data", lambda *args, **kwargs: asked.append(args))
    at = typed_train("model", "someone/some-model")
    (error,) = at.error
    assert error.value.startswith("this server is shared: the model must be one of minilm, tiny-bert")
    assert asked == [] and queue.jobs == []
    assert at.selectbox[2].options == ["bbc-news"]  # no hub datasets to choose from


def test_a_visitor_sees_their_own_job_and_only_counts_of_others(empty_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    gate = Gate()
    queue = fake_queue(monkeypatch, gate, visitor="b")
    theirs = queue.submit([replace(CONFIGS[0], seed=11)], Path("."), owner="a")
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    next(n for n in at.number_input if n.label == "First training seed").set_value(22).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    mine = next(job for job in queue.jobs if job.owner == "b")
    text = " ".join(element.value for element in [*at.markdown, *at.caption] if isinstance(element.value, str))
    bars = [bar.proto.text for bar in at.get("progress")]
    assert "1 job(s) training, 1 waiting" in text and "Yours: 1st in line" in text
    assert f"Your job {mine.id}" in text and f"Job {theirs.id}" not in text and "seed 11" not in " ".join(bars)
    assert bars == [mine.names[0]] and "seed 22" in bars[0]
    assert [button.label for button in at.button if button.key == f"cancel-job-{mine.id}"] == ["Cancel"]
    at.button(key=f"cancel-job-{mine.id}").click().run()
    assert mine.status == "cancelled" and theirs.status == "running"
    gate.release.set()
    wait_until_idle(queue)


def test_two_quick_train_presses_on_a_single_user_server_both_run(empty_store, monkeypatch):
    monkeypatch.delenv("PEFTVIZ_SHARED", raising=False)
    gate = Gate()
    queue = fake_queue(monkeypatch, gate, visitor=None)
    tabs = [AppTest.from_file(TRAIN_PAGE, default_timeout=60).run() for _ in range(2)]
    for tab, method in zip(tabs, ("prefix-tuning", "lora")):  # the same runs twice would be one job (a double click)
        tab.selectbox[0].set_value("smoke").run()
        tab.selectbox[1].set_value(method).run()
    for tab in tabs:  # the second press while the first job trains
        tab.button[0].click().run()
        assert not tab.exception and not tab.error
    assert len(queue.jobs) == 2 and queue.jobs[1].status == "waiting"
    gate.release.set()
    wait_until_idle(queue)
    assert [job.status for job in queue.jobs] == ["done", "done"] and len(gate.started) == 2


@pytest.mark.slow
def test_a_cancelled_run_is_resumed_from_the_train_page_keeping_its_finished_epochs(empty_store, monkeypatch):
    """Cancel a real job between epochs (its child process stopped), then Resume it on the Train page."""
    from peftviz.run_config import preset_config
    from peftviz.store.runs import list_runs

    queue = fake_queue(monkeypatch, train=None)  # the real trainer, in a child process
    job = queue.submit([preset_config("smoke", epochs=3)], empty_store, owner="me")
    wait_for(lambda: any(event.epoch == 2 for event in job.progress.values()), 120)  # epoch 1 is stored
    queue.cancel(job)
    wait_until_idle(queue)
    (stopped,) = list_runs(empty_store)
    assert job.status == "cancelled" and stopped.status == "incomplete" and stopped.epochs_done >= 1
    kept = [json.loads(line) for line in (stopped.path / "metrics.jsonl").read_text().splitlines()]

    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    assert at.expander[-1].label == "Resume a stopped run (1)"
    at.button(key="train_resume").click().run()
    assert not at.exception and not at.error
    resumed = queue.jobs[-1]
    assert [run.path for run in resumed.resume] == [stopped.path] and resumed.configs == []
    wait_until_idle(queue, 180)
    assert resumed.status == "done", resumed.error
    assert [(outcome.run, outcome.word) for outcome in resumed.outcomes] == [(stopped.config.run_title, "resumed")]
    (run,) = list_runs(empty_store)
    lines = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert run.status == "complete" and [line["epoch"] for line in lines] == [1, 2, 3]
    assert lines[0] == kept[0]  # epoch 1 (stored before the cancel) was kept, timing and all, not trained again


def test_the_servers_owner_may_cancel_any_job_and_sees_none_of_its_settings(empty_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("PEFTVIZ_OWNER_TOKEN", "s3cret")
    gate = Gate()
    queue = fake_queue(monkeypatch, gate, visitor="owner")
    theirs = queue.submit([replace(CONFIGS[0], seed=11)], Path("."), owner="a")
    visitor = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()  # without the token: counts only
    assert not visitor.exception and not [b for b in visitor.button if b.key == f"cancel-job-{theirs.id}"]
    owner = AppTest.from_file(TRAIN_PAGE, default_timeout=60)
    owner.query_params["owner"] = "s3cret"
    owner.run()
    text = " ".join(m.value for m in owner.markdown)
    assert f"**Job {theirs.id}** from another browser or visitor: 1 run(s), training" in text and "seed 11" not in text
    owner.button(key=f"cancel-job-{theirs.id}").click().run()
    assert theirs.cancel_requested  # (the fake trainer has no process to stop: see the test with a real one)
    gate.release.set()
    wait_until_idle(queue)
