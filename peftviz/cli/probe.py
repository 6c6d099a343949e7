"""`probe`: each method's training micro-batch, AdamW step and inference batch timed on this machine's device, at
each length: what `--plan`'s estimates rest on (`peftviz.sweep.cost`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from peftviz.cli.common import count_flag, device_flag, keep_freed_memory, methods_flag
from peftviz.run_config import TrainConfig
from peftviz.tables import format_table

HELP = (
    "time each method's training step and inference on this machine's device, at each length "
    "(what --plan's estimates rest on)"
)


def lengths_flag(text: str) -> list[int]:
    from peftviz.options import shown
    from peftviz.run_config import MAX_LENGTH
    from peftviz.sweep.cost import MAX_PROBE_LENGTHS

    parts = [part.strip() for part in text.split(",") if part.strip()]
    numbers = all(part.isascii() and part.isdigit() and len(part) <= 9 for part in parts)
    lengths = [int(part) for part in parts] if numbers and len(parts) <= MAX_PROBE_LENGTHS else []
    if not lengths or not all(2 <= n <= MAX_LENGTH for n in lengths):
        raise argparse.ArgumentTypeError(
            f"--lengths takes 1 to {MAX_PROBE_LENGTHS} token counts in [2, {MAX_LENGTH}], "
            f"comma-separated (512,1024), not {shown(text)}"
        )
    return lengths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from peftviz.run_config import MAX_BATCH
    from peftviz.sweep.cost import CPU_BATCH, CPU_LENGTHS, GPU_LENGTHS, MAX_PROBE_STEPS, RECORDED_ARCHITECTURES

    recorded = ", ".join(RECORDED_ARCHITECTURES)
    on_gpu, on_cpu = (",".join(str(n) for n in lengths) for lengths in (GPU_LENGTHS, CPU_LENGTHS))
    parser.add_argument(
        "--model",
        default=next(iter(RECORDED_ARCHITECTURES)),
        help=f"encoder (random weights from its config; recorded offline: {recorded}; default: %(default)s)",
    )
    parser.add_argument(
        "--methods",
        type=methods_flag,
        default="paper",
        metavar="METHODS",
        help="paper (default), all, peft, long-documents, or a comma-separated list of methods",
    )
    parser.add_argument(
        "--lengths",
        type=lengths_flag,
        default=None,
        metavar="T,T,...",
        help=f"tokens per document (default: {on_gpu} on a GPU, {on_cpu} on a CPU)",
    )
    parser.add_argument(
        "--batch-size",
        type=count_flag("--batch-size", MAX_BATCH),
        default=None,
        metavar="B",
        help=f"default: 8 on a GPU, {CPU_BATCH} on a CPU",
    )
    parser.add_argument(
        "--device", type=device_flag, default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N"
    )
    parser.add_argument(
        "--precision",
        choices=TrainConfig.choices()["precision"],
        default="auto",
        help="as a run trains (auto: bf16 on a GPU that has it, else fp32)",
    )
    parser.add_argument(
        "--steps",
        type=count_flag("--steps", MAX_PROBE_STEPS),
        default=3,
        help="timed steps per method and length (default: 3)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="also save the times as JSON, for `--plan --step-times FILE` on another machine",
    )


def run(args: argparse.Namespace) -> int:
    """Time each method at each length, print the times, and save them with --out."""
    from peftviz.run_config import comparison_methods
    from peftviz.sweep.cost import CPU_BATCH, CPU_LENGTHS, GPU_LENGTHS, check_out_path, checked_device, one_line, probe

    if args.out:
        check_out_path(args.out)  # before the probe's minutes, not after
    keep_freed_memory()
    on_cpu = checked_device(args.device, "--device").type == "cpu"
    lengths = args.lengths or (CPU_LENGTHS if on_cpu else GPU_LENGTHS)
    batch = args.batch_size or (CPU_BATCH if on_cpu else 8)
    methods = comparison_methods(args.methods)
    times = probe(args.model, methods, lengths, batch, args.device, args.precision, args.steps)
    print(format_table(times.rows()))
    print("\n" + "\n".join(times.describe()))
    if args.out:
        from peftviz.sweep.cost import save_step_times

        save_step_times(times, args.out)
        print(f"saved to {one_line(str(args.out))}")
    return 0
