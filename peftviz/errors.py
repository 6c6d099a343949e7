"""The one base class of the errors peftviz raises for what a user gave it.

A page or the CLI catches `PeftvizError` and shows its first line: a bad setting, a model or data
that cannot be loaded, a run folder that cannot be read, a training that stopped. Anything else
is a bug and keeps its traceback. Each subclass is also the built-in error it used to be
(ValueError, RuntimeError), so code that catches those keeps working.
"""

from __future__ import annotations


class PeftvizError(Exception):
    """A user's mistake or a damaged input, explained in one line."""


class ConfigError(PeftvizError, ValueError):
    """A setting or an argument out of range or not among its choices; the message names it."""


class ModelLoadError(PeftvizError, ValueError):
    """The model path or id cannot be loaded as a supported encoder."""


class DataError(PeftvizError, ValueError):
    """A dataset that cannot be used: the message says what is wrong and how to fix it."""


class RunError(PeftvizError, ValueError):
    """A run folder that cannot be read; the message names the folder and the problem."""


class TrainingError(PeftvizError, RuntimeError):
    """Training stopped (e.g. a non-finite loss); finished epochs are kept in the run folder."""


class ExchangeError(PeftvizError, ValueError):
    """A model to import or a run to export that peftviz cannot carry over exactly; the message says why."""
