"""An evaluation's calibration where the user already looks: TensorBoard and MLflow.

    calibration_summary(line, probs, labels)  ECE, Brier and NLL as the epoch's metrics line holds them (the run's
                                         ece_bins equal-width bins), and smooth ECE: the registry's estimators
                                         (`calibration.estimators`), as the pages show them
    reliability_figure(probs, labels)    relplot's smooth reliability diagram of the top-label confidence,
                                         with its binned ECE in the title (matplotlib)
    log_tensorboard(...), log_mlflow(...)  the four numbers as scalars under "peftviz/", and the figure

The figure is matplotlib, not the app's plotly: TensorBoard shows images only, and plotly renders
images only through a browser (kaleido); relplot, the field's library for smooth calibration, draws
its diagram with matplotlib, so the trackers get the smooth diagram of Błasiok & Nakkiran (2023).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from peftviz.calibration.estimators import point_estimates
from peftviz.errors import ConfigError

SUMMARY = ("ece", "smooth_ece", "brier", "nll")
TAG = "peftviz"
# the Trainer refuses a missing tracker when it is built; this line is for a package that fails to import later
MISSING = "the Trainer reports to {tracker}, but its package does not import: pip install {package}"


def calibration_summary(line: dict, probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """{ece, smooth_ece, brier, nll} of an epoch: its metrics line's numbers (computed once, when it was recorded),
    and the smooth ECE of probs (N, C) against labels (N,), which a metrics line does not hold."""
    smooth = point_estimates(probs, labels, metrics=["smooth_ece"])["smooth_ece"]
    return {name: smooth if name == "smooth_ece" else line[name] for name in SUMMARY}


def reliability_figure(probs: np.ndarray, labels: np.ndarray, title: str):
    """relplot's smooth reliability diagram of confidence (max prob) against correctness: a matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg", force=False)  # no display: the figure is written, never shown
    import relplot

    confidence = probs.max(axis=1)  # (N,)
    correct = (probs.argmax(axis=1) == labels).astype(float)  # (N,)
    # no bootstrap band: its 200 refits cost ~1 s per evaluation of 1,000 examples, the curve ~20 ms
    figure, _ = relplot.rel_diagram(confidence, correct, plot_confidence_band=False, report_CE_std=False)
    figure.suptitle(title)
    return figure


def log_tensorboard(log_dir: str | Path, summary: dict[str, float], figure, step: int) -> None:
    """The summary as scalars peftviz/<name> and the figure as peftviz/reliability, at `step`, into an
    event file of `log_dir` (the Trainer's logging_dir: TensorBoard shows both beside its own scalars)."""
    writer = _tensorboard_writers.get(str(log_dir))
    if writer is None:
        writer = _tensorboard_writers[str(log_dir)] = _summary_writer_class()(log_dir=str(log_dir))
    for name, value in summary.items():
        writer.add_scalar(f"{TAG}/{name}", value, step)
    writer.add_figure(f"{TAG}/reliability", figure, step, close=False)
    writer.flush()


_tensorboard_writers: dict = {}  # log_dir -> SummaryWriter: one event file per folder and process


def _summary_writer_class():
    """torch's SummaryWriter (it needs the tensorboard package), else tensorboardX's, as the Trainer's
    TensorBoardCallback picks; neither installed is one line that says what to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ConfigError(MISSING.format(tracker="tensorboard", package="tensorboard")) from None
    return SummaryWriter


def close_tensorboard() -> None:
    for writer in _tensorboard_writers.values():
        writer.close()
    _tensorboard_writers.clear()


def log_mlflow(summary: dict[str, float], figure, step: int, evaluation: int) -> bool:
    """The summary as metrics peftviz/<name> at `step` and the figure as the artifact
    peftviz/reliability_<evaluation>.png, in MLflow's active run (the Trainer's MLflowCallback starts it).
    False, and nothing logged, when no run is active."""
    try:
        import mlflow
    except ImportError:
        raise ConfigError(MISSING.format(tracker="mlflow", package="mlflow")) from None
    if mlflow.active_run() is None:
        return False
    mlflow.log_metrics({f"{TAG}/{name}": value for name, value in summary.items()}, step=step)
    mlflow.log_figure(figure, f"{TAG}/reliability_{evaluation:03d}.png")
    return True
