"""What every local source checks: limits on size, and error messages of one line.

Hostile input. Whatever is wrong with a local file or folder is a `DataError` whose message is
one line naming the file and, where there is one, the row (CSV: the n-th record after the header)
or the line (JSONL). Only regular files are read: a FIFO, a device such as /dev/zero or a socket,
given directly or inside a class folder, is refused before a byte is read; a symbolic link to a
regular file is followed. Limits keep time and memory bounded:

- `MAX_FILE_BYTES` (512 MB) per .csv or .jsonl file, and for the texts of a class folder together
  (counted in characters). At its peak, loading takes about eight times the file in memory (the
  decoded text, the parsed rows, and Arrow's copies: a 64 MB CSV takes 540 MB), so 512 MB keeps a
  load near 4 GB; the datasets this tool trains on in reasonable time on a CPU are tens of MB.
- `MAX_TEXT_CHARS` (1,000,000 characters, some 250,000 tokens) per text, and csv's field size
  limit with it. Tokenizers tokenize a whole text before truncating it; one 50 MB text takes GBs.
- `MAX_ROWS` (1,000,000) examples: a parsed row costs some hundreds of bytes of Python objects, so
  512 MB of tiny rows ("a,1") would otherwise need tens of GB.
- `MAX_LABEL_CHARS` (1,000) per label: a label is a class name; a longer one is a text in the wrong
  column (and Python refuses to read integers of more than 4,300 digits).

The sources read these limits as `checks.MAX_...` when they run, so a test that lowers one here
lowers it for every source.
"""

from __future__ import annotations

from peftviz import files
from peftviz.errors import DataError

MAX_FILE_BYTES = 512 * files.MB  # per data file, and for a class folder's texts together (module docstring)
MAX_TEXT_CHARS = 1_000_000  # per text: tokenizers tokenize all of it before truncating
MAX_ROWS = 1_000_000  # examples per file or folder: each parsed row costs hundreds of bytes
MAX_LABEL_CHARS = 1_000  # a class name; longer is a text in the label column
SHOWN_CHARS = 60  # of a value quoted in an error message


def printable(text: str) -> str:
    """A path or name for a message: non-printable characters (a newline in a file name) escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


def quoted(value) -> str:
    """A value from a file for a message: quoted, escaped to one line, cut to SHOWN_CHARS characters."""
    if isinstance(value, (list, dict)):
        return "a JSON array" if isinstance(value, list) else "a JSON object"
    shown = repr(value[: SHOWN_CHARS + 1] if isinstance(value, str) else value)
    return shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 1] + "…"


def check_unicode(text: str, at: str, what: str) -> None:
    """JSON escapes can spell a lone surrogate ("\\ud800"), which no UTF-8 (nor Arrow) can store."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise DataError(f"{at} has a {what} that is not valid Unicode (at character {err.start})") from None
