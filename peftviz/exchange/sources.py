"""Where a model to import comes from: a local folder or a hub id, and what kind of folder it is.

    adapter_config.json     a Hugging Face peft adapter (kind "peft-adapter")
    peftviz.json            a run exported by peftviz with one of its own methods (kind "peftviz")
    config.json             a Hugging Face model folder, read as a sequence classifier ("hf-classifier")

in that order (a peftviz export of a LoRA run is a peft adapter with a peftviz.json beside it). A hub
id is downloaded with `huggingface_hub.snapshot_download` (JSON, safetensors and tokenizer files
only: never pickled weights), and its commit is the revision recorded. Every file read is recorded
by its SHA-256, so a run says exactly what it was computed from.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from peftviz.errors import ExchangeError
from peftviz.files import MB, FileProblem, read_text
from peftviz.options import shown, with_article
from peftviz.paths import hub_off
from peftviz.store.schema import HF_CLASSIFIER, PEFT_ADAPTER, PEFTVIZ_EXPORT

ADAPTER_CONFIG, ADAPTER_WEIGHTS, PICKLED_ADAPTER = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
MANIFEST = "peftviz.json"
# the file that marks each kind of source (`store.schema.IMPORT_KINDS`), in the order they are looked for
KINDS = {ADAPTER_CONFIG: PEFT_ADAPTER, MANIFEST: PEFTVIZ_EXPORT, "config.json": HF_CLASSIFIER}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model"]  # configs, weights, vocabularies
JSON_LIMIT = 4 * MB


@dataclass
class Source:
    """A folder to import from: its kind, the name it was given by, its hub revision (None when local),
    and the SHA-256 of each of its JSON and safetensors files."""

    folder: Path
    kind: str
    name: str
    revision: str | None = None
    files: dict[str, str] = field(default_factory=dict)

    def json(self, file: str) -> dict:
        """A JSON object of the folder, read with a size limit; ExchangeError naming it otherwise."""
        try:
            value = json.loads(read_text(self.folder / file, JSON_LIMIT))
        except RecursionError:  # brackets nested thousands deep: json gives up in its own recursion
            raise ExchangeError(f"{self.name}: cannot read {file}: it is nested too deeply") from None
        except (FileProblem, OSError, ValueError) as err:
            raise ExchangeError(f"{self.name}: cannot read {file}: {err}".splitlines()[0]) from None
        if not isinstance(value, dict):
            raise ExchangeError(f"{self.name}: {file} holds {with_article(type(value).__name__)}, not an object")
        return value

    def has(self, file: str) -> bool:
        return (self.folder / file).is_file()


def open_source(name: str) -> Source:
    """The folder `name` names, downloaded first if it is a hub id; its kind from the files it holds."""
    folder, revision = _local_or_hub(name)
    kind = next((kind for file, kind in KINDS.items() if (folder / file).is_file()), None)
    if kind is None:
        raise nothing_to_import(name)
    return Source(folder, kind, name, revision, _file_hashes(folder))


def nothing_to_import(name: str) -> ExchangeError:
    return ExchangeError(
        f"{name} holds no peft adapter ({ADAPTER_CONFIG}), Hugging Face model (config.json) or peftviz export "
        f"({MANIFEST}): nothing to import"
    )


def check_source(name: str) -> None:
    """What a form can check without downloading or loading anything: a local folder exists and holds
    something to import; anything else must read as a hub id, and while the hub is off (HF_HUB_OFFLINE) be
    in this machine's Hugging Face cache, found as the import itself would find it (`_hub_snapshot`)."""
    if not name:
        raise ExchangeError("give the folder or hub id of the model to import")
    path = _on_disk(name)
    if path is not None and path.is_dir():
        if not any((path / file).is_file() for file in KINDS):
            raise nothing_to_import(name)
        return
    _refuse_unless_hub_id(name)
    if hub_off():
        _hub_snapshot(name, cached_only=True)


def _on_disk(name: str) -> Path | None:
    """`name` as a path (`~` expanded) where something is there, else None; ExchangeError in one line for a
    name the system cannot look up (too long for the file system, a `~user` who has no home)."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError) as err:
        raise ExchangeError(f"no folder {shown(name)}: {getattr(err, 'strerror', None) or err}") from None


def _refuse_unless_hub_id(name: str) -> None:
    if _on_disk(name) is not None:
        raise ExchangeError(f"{name} is a file; give the folder that holds the model or adapter")
    if name.startswith((".", "/", "~")) or not HUB_ID.fullmatch(name):
        raise ExchangeError(f"no folder {name} (and it is not a hub id of the form owner/name)")


def _local_or_hub(name: str) -> tuple[Path, str | None]:
    path = _on_disk(name)
    if path is not None and path.is_dir():
        return path, None
    _refuse_unless_hub_id(name)
    folder = _hub_snapshot(name, cached_only=hub_off())
    return folder, folder.name  # the snapshot folder is named by its commit


def _hub_snapshot(name: str, cached_only: bool) -> Path:
    """Hub id `name`'s snapshot folder (JSON, safetensors and tokenizer files): downloaded, or with
    `cached_only` (the hub off) found in this machine's Hugging Face cache without asking the hub."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, allow_patterns=HUB_FILES, local_files_only=cached_only))
    except (OSError, ValueError, HfHubHTTPError) as err:  # offline, no such repository, no access: the hub's reason
        if cached_only and isinstance(err, LocalEntryNotFoundError):
            raise ExchangeError(
                f"cannot download {name} from the Hugging Face hub: the hub is off (HF_HUB_OFFLINE) and this "
                f"machine's cache lacks it; download it once where the hub is reachable (hf download {name}), "
                "or give its folder"
            ) from None
        raise ExchangeError(f"cannot download {name} from the Hugging Face hub: {err}".splitlines()[0]) from None


def _file_hashes(folder: Path) -> dict[str, str]:
    hashes = {}
    for path in sorted(folder.iterdir()):
        if path.suffix in (".json", ".safetensors") and path.resolve().is_file():  # the hub's cache links its files
            digest = hashlib.sha256()
            with path.open("rb") as file:
                for block in iter(lambda file=file: file.read(1 << 20), b""):
                    digest.update(block)
            hashes[path.name] = digest.hexdigest()
    return hashes
