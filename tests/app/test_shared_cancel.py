"""On a shared server a visitor cancels only their own jobs (issue 45): the page draws no Cancel button for
another visitor's job, and the cancel itself is checked again (`jobpanel.cancel`, `JobQueue.cancel`), so a
replayed click, a direct call or a token that has since changed cancels nothing. The server's owner, who
opened the app with ?owner=<PEFTVIZ_OWNER_TOKEN>, may cancel any; a single-user server lets everyone."""

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates
from streamlit.testing.v1 import AppTest

from peftviz.app.jobs import JobQueue, NotYours
from peftviz.app.policy import ServerPolicy
from peftviz.sweep.variants import comparison_configs
from tests.support.job_helpers import Gate, fake_queue, wait_until_idle

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PAGE = str(ROOT / "pages" / "1_Train.py")
CONFIG = comparison_configs("smoke")[0]
TOKEN = "s3cret"
FUZZ = settings(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# a page that presses "cancel" on every active job directly, as a forged request would, and says what happened
CANCEL_ALL = """
import streamlit as st
from peftviz.app import jobpanel
from peftviz.app.jobs import NotYours

queue = jobpanel.job_queue()
for job in queue.active():
    try:
        jobpanel.cancel(queue, job)
        st.write(f"cancelled {job.id}")
    except NotYours as err:
        st.error(str(err))
"""


def job_of(queue: JobQueue, owner: str, seed: int):
    return queue.submit([replace(CONFIG, seed=seed)], Path("."), owner=owner)


@pytest.fixture
def shared(monkeypatch, empty_store):
    monkeypatch.setenv("PEFTVIZ_SHARED", "1")
    monkeypatch.setenv("PEFTVIZ_OWNER_TOKEN", TOKEN)
    gate = Gate()
    queue = fake_queue(monkeypatch, gate, visitor="b")  # every page of these tests is visitor b's
    yield queue
    gate.release.set()
    wait_until_idle(queue)


def cancel_buttons(at: AppTest) -> list[str]:
    return sorted(button.key for button in at.button if (button.key or "").startswith("cancel-job-"))


# ------------------------------------------------------------------------------------ the queue


def test_the_queue_refuses_a_visitor_another_visitors_job():
    gate = Gate()
    queue = JobQueue(max_running=1, train=gate)
    running, waiting = job_of(queue, "a", 1), job_of(queue, "a", 2)
    for job in (running, waiting):
        with pytest.raises(NotYours, match=f"job {job.id} is another visitor's: only they, or the server's owner"):
            queue.cancel(job, by="b")
        assert job.active and not job.cancel_requested
    queue.cancel(waiting, by="a")  # their own
    queue.cancel(running, by="owner", any_job=True)  # the server's owner
    assert waiting.status == "cancelled" and running.cancel_requested
    gate.release.set()
    wait_until_idle(queue)


# ----------------------------------------------------------------------------------- on the page


def test_a_visitor_gets_a_cancel_button_for_their_own_jobs_only(shared):
    theirs_running, theirs_waiting, mine = job_of(shared, "a", 1), job_of(shared, "a", 2), job_of(shared, "b", 3)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    assert not at.exception and cancel_buttons(at) == [f"cancel-job-{mine.id}"]
    at.button(key=f"cancel-job-{mine.id}").click().run()
    assert mine.status == "cancelled" and theirs_running.active and theirs_waiting.active
    assert not any(job.cancel_requested for job in (theirs_running, theirs_waiting))


def test_a_replayed_click_on_another_visitors_cancel_button_cancels_nothing(shared):
    theirs = job_of(shared, "a", 1)
    owner = AppTest.from_file(TRAIN_PAGE, default_timeout=60)
    owner.query_params["owner"] = TOKEN
    owner.run()
    pressed = owner.button(key=f"cancel-job-{theirs.id}")  # the click the owner's page would send
    visitor = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    assert cancel_buttons(visitor) == []
    replayed = WidgetStates()
    replayed.widgets.append(WidgetState(id=pressed.id, trigger_value=True))
    visitor._run(widget_state=replayed)  # the owner's click, sent from the visitor's session
    assert not visitor.exception and theirs.active and not theirs.cancel_requested


def test_a_direct_cancel_is_refused_in_one_line_unless_it_is_the_visitors_or_the_server_owners(shared):
    theirs, mine = job_of(shared, "a", 1), job_of(shared, "b", 2)
    at = AppTest.from_string(CANCEL_ALL, default_timeout=60).run()
    assert not at.exception
    assert [error.value for error in at.error] == [
        f"job {theirs.id} is another visitor's: only they, or the server's owner, may cancel it"
    ]
    assert [block.value for block in at.markdown] == [f"cancelled {mine.id}"]
    assert theirs.active and not theirs.cancel_requested and mine.status == "cancelled"

    owner = AppTest.from_string(CANCEL_ALL, default_timeout=60)
    owner.query_params["owner"] = TOKEN
    owner.run()
    assert not owner.error and theirs.cancel_requested


def test_a_session_that_gave_an_old_owner_token_may_no_longer_cancel_others_jobs(shared, monkeypatch):
    theirs = job_of(shared, "a", 1)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60)
    at.query_params["owner"] = TOKEN
    at.run()
    assert cancel_buttons(at) == [f"cancel-job-{theirs.id}"]
    at.query_params.clear()  # the session keeps the token it was given while it moves between pages
    at.run()
    assert cancel_buttons(at) == [f"cancel-job-{theirs.id}"]
    monkeypatch.setenv("PEFTVIZ_OWNER_TOKEN", "changed")
    at.run()
    assert cancel_buttons(at) == [] and theirs.active and not theirs.cancel_requested


@pytest.mark.parametrize("given", ["S3CRET", "s3cret ", "s3cret\n", "é", "\x00", "s" * 10_000, "%00", "s3cre"])
def test_a_hostile_owner_token_on_the_page_is_no_owners(shared, given):
    theirs = job_of(shared, "a", 1)
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60)
    at.query_params["owner"] = given
    at.run()
    assert not at.exception and cancel_buttons(at) == [] and theirs.active


def test_a_single_user_server_lets_every_visitor_cancel_every_job(monkeypatch, empty_store):
    monkeypatch.delenv("PEFTVIZ_SHARED", raising=False)
    gate = Gate()
    queue = fake_queue(monkeypatch, gate, visitor="b")
    theirs = job_of(queue, "a", 1)
    at = AppTest.from_string(CANCEL_ALL, default_timeout=60).run()
    assert not at.exception and not at.error and theirs.cancel_requested
    gate.release.set()
    wait_until_idle(queue)


# ------------------------------------------------------------------------------ hostile tokens


@FUZZ
@given(token=st.one_of(st.none(), st.text(max_size=40), st.sampled_from([TOKEN, TOKEN.upper(), TOKEN + "\x00"])))
def test_only_the_servers_own_token_lets_a_visitor_cancel_any_job(token):
    """`ServerPolicy.may_cancel_any` on any text (surrogates, NULs, none): True exactly for the server's token,
    never for a server without one, always on a single-user server; it never raises."""
    assert ServerPolicy(shared=True, owner_token=TOKEN).may_cancel_any(token) is (token == TOKEN)
    assert ServerPolicy(shared=True, owner_token="").may_cancel_any(token) is False
    assert ServerPolicy(shared=False).may_cancel_any(token) is True
