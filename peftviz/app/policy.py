"""What a server lets its visitors do: the single-user default, or a reading group's shared server.

    PEFTVIZ_SHARED=1          shared mode (default: off, the single-user server of its owner)
    PEFTVIZ_JOBS=N            training jobs that run at once (default 1); others wait in line
    PEFTVIZ_QUEUE=N           jobs that may wait in all (default 20)
    PEFTVIZ_JOBS_PER_VISITOR  jobs a visitor may have waiting or training (shared default 2)
    PEFTVIZ_RUNS_PER_VISITOR  runs a visitor's jobs may hold waiting or training (shared default 12): a job
                              of a comparison at 10 seeds is one job of 60 or more runs
    PEFTVIZ_RUNS_QUEUED       runs that may wait or train in all, every visitor's together (shared
                              default 60): what a visitor who opens a new browser (a new visitor) cannot escape
    PEFTVIZ_UPLOAD_MB=N       largest dataset upload in MB (shared default 25, else 512)
    PEFTVIZ_OWNER_TOKEN=T     shared mode: a visitor who opens the app with ?owner=T may cancel
                              any visitor's job (everyone may cancel their own)

In shared mode the browser cannot name anything on the server: data are the built-in corpus or
an upload (stored under a name peftviz makes from its content, `peftviz.data.uploads`; the Train page
offers no "local path"), models are the built-in encoders or those the store's runs were trained
on, and a run to start from is chosen among the store's runs (a select box, never a typed path:
`sweep.variants.starting_runs`). The run limits count runs, not jobs: one job may hold a comparison at
ten seeds (`jobs.JobQueue`). Anything else is refused by a
sentence that depends only on what was typed, never on the server's files: `check_dataset` and
`check_model` decide from the string alone, before anything is opened, so a visitor cannot learn
whether a path exists or what it holds, and cannot make the server wait on the hub. (The
single-user server trusts its one user, who can read the files anyway.) Streamlit itself accepts
uploads up to its `server.maxUploadSize` (200 MB by default) before peftviz sees them: run a shared
server with `--server.maxUploadSize` at the same limit so larger files stop in the browser.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import PurePath

from peftviz.data.uploads import UPLOAD_NAME
from peftviz.errors import ConfigError, DataError, ModelLoadError
from peftviz.files import MB

BUILTIN_MODELS = ("minilm", "tiny-bert", "tiny-roberta", "tiny-longformer")
LONG_MINILM = re.compile(r"long-minilm(-w\d+)?")
# a shared server's run limits: 12 runs are the papers' six methods at two seeds (the quick preset is
# sized for six runs in under 12 minutes on 2 CPU cores, `run_config.PRESETS`); 60 are five visitors' worth
RUNS_PER_VISITOR = 12
RUNS_QUEUED = 60
DATASET_REFUSED = (
    "this server is shared: it trains on the built-in corpus or a file you upload, not on server paths or hub datasets"
)


def _number(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{name}={text!r}: expected a whole number of at least 1")
    return int(text)


@dataclass(frozen=True)
class ServerPolicy:
    shared: bool = False
    max_running: int = 1
    max_waiting: int = 20
    per_visitor: int | None = None  # None: no limit (the single-user server)
    runs_per_visitor: int | None = None  # runs not yet trained in a visitor's jobs; None: no limit
    runs_queued: int | None = None  # runs not yet trained in all jobs; None: no limit
    upload_limit: int = 512 * MB  # bytes
    owner_token: str = ""

    @classmethod
    def from_env(cls) -> ServerPolicy:
        """The policy the environment sets (see the module docstring); a malformed number is a ConfigError."""
        shared = os.environ.get("PEFTVIZ_SHARED", "").strip().lower() in ("1", "true", "yes", "on")
        return cls(
            shared=shared,
            max_running=_number("PEFTVIZ_JOBS", 1),
            max_waiting=_number("PEFTVIZ_QUEUE", 20),
            per_visitor=_number("PEFTVIZ_JOBS_PER_VISITOR", 2) if shared else None,
            runs_per_visitor=_number("PEFTVIZ_RUNS_PER_VISITOR", RUNS_PER_VISITOR) if shared else None,
            runs_queued=_number("PEFTVIZ_RUNS_QUEUED", RUNS_QUEUED) if shared else None,
            upload_limit=_number("PEFTVIZ_UPLOAD_MB", 25 if shared else 512) * MB,
            owner_token=os.environ.get("PEFTVIZ_OWNER_TOKEN", "") if shared else "",
        )

    def check_dataset(self, spec: str, builtin: str, uploads: PurePath) -> None:
        """Shared mode: only the built-in corpus and files in the store's uploads folder, by name alone."""
        if not self.shared or spec == builtin:
            return
        path = PurePath(spec)
        if not (path.parent == uploads and UPLOAD_NAME.fullmatch(path.name)):
            raise DataError(DATASET_REFUSED)

    def check_model(self, name: str, store_models: list[str]) -> None:
        """Shared mode: only the built-in encoders and the models the store's runs name, by name alone."""
        if not self.shared or name in self.models(store_models) or LONG_MINILM.fullmatch(name):
            return
        raise ModelLoadError(
            f"this server is shared: the model must be one of {', '.join(self.models(store_models))}; "
            "server paths and hub ids are not loaded"
        )

    def may_cancel_any(self, token: str | None) -> bool:
        """Whether a visitor who gave `token` (?owner=) may cancel every job: on a single-user server, every
        visitor; on a shared one, only with the server's PEFTVIZ_OWNER_TOKEN (none set: nobody), compared in
        constant time."""
        if not self.shared:
            return True
        if not self.owner_token or not isinstance(token, str):
            return False
        return hmac.compare_digest(
            token.encode(errors="surrogatepass"), self.owner_token.encode(errors="surrogatepass")
        )

    @staticmethod
    def models(store_models: list[str]) -> list[str]:
        """The models a shared server trains: its built-in encoders, then the store's, once each."""
        return list(dict.fromkeys([*BUILTIN_MODELS, *sorted(store_models)]))


def visitor_key(xsrf_cookie: str | None, session_id: str) -> str:
    """A visitor's identity that survives a page reload: from Streamlit's XSRF cookie when the browser
    sent one (tornado's format "2|mask|masked token|time": the mask changes on every page load, the
    token it hides does not), else the session (one tab, until reloaded)."""
    parts = (xsrf_cookie or "").split("|")
    if len(parts) == 4 and parts[0] == "2":
        try:
            mask, masked = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
        except ValueError:
            masked = b""
        if masked and mask:
            token = bytes(byte ^ mask[i % len(mask)] for i, byte in enumerate(masked))
            return "browser-" + hashlib.sha256(token).hexdigest()[:16]
    return "session-" + session_id
