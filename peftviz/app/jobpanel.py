"""The training queue on the app's pages: a Train press submitted for its visitor, the queue, the
visitor's own jobs with their progress, and cancelling.

A visitor is a browser (`visitor`: its identity survives a reload and is shared by its tabs). The
panel shows the visitor's own jobs in full (runs, progress bars, errors) with a Cancel button, and
the rest of the queue only as counts: another visitor's settings, run names and errors never show.
While any job waits or trains, the panel is a fragment redrawn every second (for a visitor with a
job of their own; every 10 s for the others, who see only counts); otherwise it is drawn once with
the page and nothing reruns, so an idle tab costs the server nothing (benchmarks/idle_cpu.py).
When one of the jobs the page saw active has ended, the whole page reruns once, which picks up the
new runs. A finished job shows to its owner on the page it was submitted from.
"""

from __future__ import annotations

import importlib.util

import streamlit as st

from peftviz.app.appkit import current_page, current_session, show_error
from peftviz.app.jobs import AlreadyQueued, Job, JobQueue, NotYours, QueueFull
from peftviz.app.policy import ServerPolicy, visitor_key
from peftviz.errors import ConfigError
from peftviz.paths import store_dir

SEEN_ACTIVE_KEY = "jobpanel.active"  # session state: ids of the jobs active at the page's last full run
OWNER_TOKEN_KEY = "jobpanel.owner_token"  # session state: the ?owner= token this visitor opened the app with
SHOW_FINISHED = 3  # a visitor's latest finished jobs shown on the page they came from


def policy() -> ServerPolicy:
    """The server's policy, read from its environment (see peftviz.app.policy); a malformed setting stops
    the page with one line naming it, rather than serving with a guess."""
    try:
        return ServerPolicy.from_env()
    except ConfigError as err:
        show_error(f"this server's settings: {err}")
        st.stop()


@st.cache_resource(show_spinner=False)
def job_queue() -> JobQueue:
    """One per server: every visitor's jobs wait in the same line."""
    server = policy()
    return JobQueue(
        server.max_running,
        server.max_waiting,
        server.per_visitor,
        runs_per_owner=server.runs_per_visitor,
        max_runs=server.runs_queued,
    )


def visitor() -> str:
    """Who is asking: the browser (by Streamlit's XSRF cookie), else this tab's session."""
    return visitor_key(st.context.cookies.get("_streamlit_xsrf"), current_session())


def cancels_any() -> bool:
    """Whether this visitor may cancel every job, as the server's owner (`ServerPolicy.may_cancel_any`): the token of
    ?owner=<PEFTVIZ_OWNER_TOKEN> is kept for the session, so it holds while the visitor moves between pages."""
    given = st.query_params.get("owner")
    if given:
        st.session_state[OWNER_TOKEN_KEY] = given
    return policy().may_cancel_any(st.session_state.get(OWNER_TOKEN_KEY))


def may_cancel(job: Job) -> bool:
    """A job's owner may cancel it; so may the server's owner (`cancels_any`)."""
    return job.owner == visitor() or cancels_any()


def cancel(queue: JobQueue, job: Job) -> None:
    """Cancel a job for this visitor: the queue refuses it (NotYours) unless it is theirs or they may cancel any,
    checked again at the press, whatever the page drew."""
    queue.cancel(job, by=visitor(), any_job=cancels_any())


def submit(configs, resume=(), engine: str = "local", imports=(), force: bool = False) -> Job | None:
    """Queue a Train (or Import) press for this visitor. A press the queue refuses is said on the page,
    never dropped in silence; returns the job, or None when refused. A press for the runs an active job
    already trains (a double click) queues nothing and says so; returns that job."""
    try:
        return job_queue().submit(
            configs, store_dir(), visitor(), tuple(resume), current_page(), engine, tuple(imports), force
        )
    except AlreadyQueued as err:
        st.info(str(err))
        return err.job if err.own else None
    except QueueFull as err:
        show_error(err)
        return None


ENGINE_LABELS = {
    "local": "this machine, one run after another",
    "ray": "Ray: each run a task, as many at once as Ray has CPUs",
}


def engine_choice() -> str:
    """Where a comparison trains (`peftviz.sweep`): here in turn, or on Ray where it is installed. Not on a
    shared server, where one visitor's sweep would take every core from the others."""
    if policy().shared or importlib.util.find_spec("ray") is None:
        return "local"
    help_text = (
        "Ray starts on this machine, or joins the cluster that RAY_ADDRESS names; the runs go to the same "
        "store, and the queue below follows them as Ray finishes them"
    )
    return st.radio("Train on", list(ENGINE_LABELS), format_func=ENGINE_LABELS.get, horizontal=True, help=help_text)


def job_panel() -> None:
    """The queue and this visitor's jobs; live while any job waits or trains (see the module docstring)."""
    queue = job_queue()
    active = {job.id for job in queue.active()}
    st.session_state[SEEN_ACTIVE_KEY] = active
    if any(job.owner == visitor() for job in queue.active()):
        _own_job_live()
    elif active:
        _others_live()
    else:
        _draw_panel(queue)


@st.fragment(run_every=1.0)
def _own_job_live() -> None:
    _redraw_or_rerun()


@st.fragment(run_every=10.0)
def _others_live() -> None:
    _redraw_or_rerun()


def _redraw_or_rerun() -> None:
    queue = job_queue()
    if st.session_state.get(SEEN_ACTIVE_KEY, set()) - {job.id for job in queue.active()}:
        st.rerun()  # a job ended: the whole page, once, to list its runs (and stop or slow the timer)
    _draw_panel(queue)


def _draw_panel(queue: JobQueue) -> None:
    me = visitor()
    summary = queue_summary(queue, me)
    if summary:
        st.caption(summary)
    for job in queue.active():
        if job.owner == me:
            _draw_own_job(queue, job)
        elif may_cancel(job):
            _draw_others_job(queue, job)
    finished = [job for job in queue.owned_by(me) if not job.active and job.origin in ("", current_page())]
    for job in finished[-SHOW_FINISHED:]:
        _draw_own_job(queue, job)


def queue_summary(queue: JobQueue, me: str) -> str:
    """One line about the queue: how many train and wait, and where this visitor's jobs are."""
    running, waiting = queue.running(), queue.waiting()
    if not running and not waiting:
        return ""
    text = (
        f"Training queue: {len(running)} job(s) training, {len(waiting)} waiting (at most {queue.max_running} at once)."
    )
    places = [queue.place(job) for job in queue.active() if job.owner == me]
    if places:
        text += (
            " Yours: " + ", ".join("training" if place == 0 else f"{ordinal(place)} in line" for place in places) + "."
        )
    return text


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _draw_own_job(queue: JobQueue, job: Job) -> None:
    with st.container(border=True):
        st.markdown(f"**Your job {job.id}**: {_status_line(queue, job)}")
        for name in job.names:
            text = _progress_text(job, name)
            timing = job.timing(name)
            st.progress(job.fraction_done(name), text=f"{text} · {timing}" if timing else text)
        _draw_outcomes(job)
        if job.status == "failed":
            st.error(f"Training stopped: {job.error}")
        _cancel_button(queue, job)


def _draw_outcomes(job: Job) -> None:
    """What became of each run that has ended: new, skipped, resumed, or failed with its error's first line."""
    if job.outcomes:
        st.markdown("\n".join(f"- {outcome.run}: {outcome.word}" for outcome in job.outcomes))


def _progress_text(job: Job, name: str) -> str:
    """ "lora · seed 0: epoch 2/3, train"; an import is evaluated, not trained: "import ./a: evaluate test"."""
    event = job.progress.get(name)
    if event is None:
        return name
    stopped = not job.active and name not in job.run_ended  # cancelled or failed in this phase
    if name in {request.title for request in job.imports}:
        return f"{name}: {'stopped in ' if stopped else ''}{event.phase}"
    return f"{name}: {'stopped in ' if stopped else ''}epoch {event.epoch}/{event.epochs}, {event.phase}"


def _draw_others_job(queue: JobQueue, job: Job) -> None:
    """Shown to the server's owner only: that a visitor's job exists and can be cancelled, not its settings.
    A visitor is a browser, and two browsers cannot be told apart from two people: the job may be this
    person's own, pressed in another browser."""
    with st.container(border=True):
        st.markdown(f"**Job {job.id}** from another browser or visitor: {_status_line(queue, job)}")
        _cancel_button(queue, job)


def _status_line(queue: JobQueue, job: Job) -> str:
    runs = f"{len(job.names)} run(s)"
    if job.status == "waiting":
        return f"{runs}, waiting ({ordinal(queue.place(job))} in line)"
    if job.status == "running":
        doing = "importing" if job.imports and not (job.configs or job.resume) else "training"
        return f"{runs}, {doing} in the background ({job.timing()}): you can switch pages and come back"
    counts = f": {job.outcome_counts()}" if job.outcomes else ""
    return {
        "done": f"{runs}, done ({job.timing()}){counts}",
        "failed": f"{runs}, failed{counts}",
        "cancelled": f"{runs}, cancelled{counts}",
    }[job.status]


def _cancel_button(queue: JobQueue, job: Job) -> None:
    """Drawn only for a job this visitor may cancel; a press is checked again by the queue (`cancel`)."""
    if job.active and may_cancel(job):
        help_text = "a training run stopped now is left incomplete: the Train page can resume it"
        if st.button("Cancel", key=f"cancel-job-{job.id}", help=help_text):
            try:
                cancel(queue, job)
            except NotYours as err:
                show_error(err)
                return
            st.rerun()
