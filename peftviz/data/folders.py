"""A local folder with one sub-folder of .txt files per class: the sub-folder's name is the class.

Sub-folders whose names start with "." or "_" (__MACOSX) are skipped; each .txt file is one text,
UTF-8 or, failing that, cp1252. Every problem is one line (`peftviz.data.checks`).
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from peftviz import files
from peftviz.data import checks
from peftviz.data.checks import check_unicode, printable, quoted
from peftviz.data.text_data import TextData, from_rows
from peftviz.errors import DataError


def load_folder(spec: str, folder: Path, seed: int) -> TextData:
    """The class folders of `folder` (given as `spec`), cut 80/10/10 by `seed`."""
    texts, labels, _ = read_folder(folder)
    return from_rows(spec, texts, labels, None, seed)


def _read_text(path: Path) -> str:
    """A .txt file, stripped; one BBC file is Latin-1 (a pound sign), so fall back to cp1252.

    The file may hold at most 4 bytes per allowed character (UTF-8's most), checked before reading.
    """
    shown = printable(str(path))
    try:
        raw = files.read_bytes(path, 4 * checks.MAX_TEXT_CHARS)
    except files.FileProblem as problem:
        raise DataError(f"file {shown} {problem}") from None
    if b"\0" in raw:  # binary, or UTF-16 (Notepad's "Unicode"): cp1252 would make it garbage
        raise DataError(f"file {shown} is not text: it has NUL bytes; save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace").strip()
    if len(text) > checks.MAX_TEXT_CHARS:
        raise DataError(f"file {shown} has {len(text):,} characters; the limit for a text is {checks.MAX_TEXT_CHARS:,}")
    return text


def class_folders(folder: Path) -> list[Path]:
    """The class sub-folders of `folder`, sorted; names starting with "." or "_" (__MACOSX) are skipped."""
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    except OSError as err:
        raise DataError(f"folder {printable(str(folder))} cannot be read ({err.strerror})") from None


def text_files(class_dir: Path) -> list[Path]:
    """The .txt files of one class folder, sorted; at most MAX_ROWS + 1 of them are listed."""
    try:
        return sorted(islice(class_dir.glob("*.txt"), checks.MAX_ROWS + 1))
    except OSError as err:
        raise DataError(f"class sub-folder {printable(str(class_dir))} cannot be read ({err.strerror})") from None


def read_folder(folder: Path) -> tuple[list[str], list[str], list[Path]]:
    """Texts, class names and paths, in sorted path order, from one sub-folder of .txt files per class."""
    shown = printable(str(folder))
    classes = class_folders(folder)
    if not classes:
        raise DataError(f"folder {shown} has no class sub-folders of .txt files")
    if len(classes) == 1:
        raise DataError(f"folder {shown} has only one class sub-folder ({quoted(classes[0].name)}); need at least two")
    texts, labels, paths = [], [], []
    total_chars = 0
    for class_dir in classes:
        check_unicode(class_dir.name, f"class sub-folder {printable(str(class_dir))}", "name")
        class_files = text_files(class_dir)
        if not class_files:
            raise DataError(f"class sub-folder {printable(str(class_dir))} has no .txt files")
        for path in class_files:
            text = _read_text(path)
            if not text:
                raise DataError(f"file {printable(str(path))} is empty")
            total_chars += len(text)
            if total_chars > checks.MAX_FILE_BYTES:
                raise DataError(
                    f"folder {shown} holds more than {checks.MAX_FILE_BYTES:,} characters of text, the limit"
                )
            if len(texts) == checks.MAX_ROWS:
                raise DataError(f"folder {shown} has more than {checks.MAX_ROWS:,} .txt files, the limit; use a sample")
            texts.append(text)
            labels.append(class_dir.name)
            paths.append(path)
    return texts, labels, paths
