"""`traceoverlap profile` and `demo`: run the reference workloads, trace them, analyze."""

from __future__ import annotations

from typing import Any

import click

from ..core.vocab import GLOO_LOOPS, SLOW_PHASES
from ._common import (
    _echo_analysis,
    _terminal,
    debug_option,
    handle_errors,
    html_report,
    write_page,
    write_text,
)


@click.command()
@click.option(
    "--strategy",
    type=click.Choice(
        ["naive", "flat", "overlap", "bucketed", "ddp", "tp", "pipeline", "fsdp", "moe"]
    ),
    default="bucketed",
    show_default=True,
    help="Data parallel, by gradient sync: naive (per-parameter, after backward), flat (one "
    "buffer, after backward), overlap (per-parameter async, during backward), bucketed (async "
    "buckets), ddp. Model parallel (an MLP of the preset's width): tp (tensor-parallel groups of "
    "--tp-size + data parallel), pipeline (GPipe, a stage per rank, --micro-batches), fsdp "
    "(all-gather before use, reduce-scatter after backward), moe (all-to-all to an expert per "
    "rank).",
)
@click.option(
    "--tp-size",
    type=click.IntRange(1, None),
    metavar="N",
    help="tp: ranks per tensor-parallel group; must divide --world-size (default 2).",
)
@click.option(
    "--micro-batches",
    type=click.IntRange(1, None),
    metavar="N",
    help="pipeline: micro-batches per step; must divide the batch (default 4).",
)
@click.option(
    "--model",
    type=click.Choice(["gpt", "mlp"]),
    default="gpt",
    show_default=True,
    help="GPT-style language model or MLP.",
)
@click.option(
    "--preset",
    type=click.Choice(["tiny", "small", "medium", "large", "xl", "comm-heavy"]),
    default="tiny",
    show_default=True,
    help="Model size: tiny runs in seconds on a CPU; small..xl are for GPUs; comm-heavy: many "
    "small gradients, batch 1 (with naive: communication exceeds compute).",
)
@click.option(
    "-n",
    "--world-size",
    type=click.IntRange(1, None),
    default=2,
    show_default=True,
    help="Ranks to start on this machine.",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False),
    help="Folder for the traces (default: runs/<strategy>).",
)
@click.option(
    "--steps",
    type=click.IntRange(1, None),
    default=5,
    show_default=True,
    help="Profiled training steps.",
)
@click.option(
    "--warmup",
    type=click.IntRange(0, None),
    default=2,
    show_default=True,
    help="Steps run before profiling starts.",
)
@click.option(
    "--bucket-mb",
    type=click.FloatRange(0, None, min_open=True),
    help="Bucket size (MiB) for bucketed / ddp (default 25 on GPU, 0.1 on CPU).",
)
@click.option(
    "--batch-size", type=click.IntRange(1, None), help="Per-rank batch (default: preset's)."
)
@click.option("--seq-len", type=click.IntRange(1, None), help="Tokens per sample for gpt.")
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16", "float16"]),
    default="float32",
    show_default=True,
    help="Autocast dtype for the forward pass.",
)
@click.option(
    "--backend",
    type=click.Choice(["gloo", "nccl"]),
    help="Process-group backend (default: nccl with CUDA, else gloo).",
)
@click.option("--slow-rank", type=int, metavar="R", help="Make rank R a straggler ...")
@click.option(
    "--slow-ms",
    type=click.FloatRange(0, None),
    default=0.0,
    metavar="MS",
    help="... sleeping MS ms each step, at --slow-phase.",
)
@click.option(
    "--slow-phase",
    type=click.Choice(list(SLOW_PHASES)),
    help="Where --slow-rank sleeps: at the start of that phase's range (pipeline forward/"
    "backward: in every micro-batch of its stage). Default: pre-backward, between forward and "
    "backward, in neither range.",
)
@click.option(
    "--host-delay-ms",
    type=click.FloatRange(0, None),
    default=0.0,
    metavar="MS",
    help="Every rank sleeps MS ms on the host after launching the step's all-reduces, before "
    "waiting for them and the optimizer (overlap/bucketed: communication in flight meets no "
    "compute; then the device idles).",
)
@click.option(
    "--comm",
    type=click.Choice(["on", "off"]),
    default="on",
    show_default=True,
    help="off: the same program with every communication call skipped (same compute and "
    "ranges): what compute costs without communication beside it (the overlap tax, "
    "traceoverlap whatif). ddp still communicates in its first two iterations: it needs "
    "--warmup >= 1.",
)
@click.option(
    "--gloo-loop",
    type=click.Choice(list(GLOO_LOOPS)),
    default="default",
    show_default=True,
    help="gloo on CPU: idle runs gloo's TCP loop threads at SCHED_IDLE. They poll while a "
    "transfer is under way, and on a machine with few cores a thread they wake can wait a "
    "scheduler tick behind them (transfers stall 4 ms at random). idle steadies transfers for "
    "what-if closed loops; communication beside compute then progresses only on idle cores.",
)
@click.option(
    "--nsys",
    is_flag=True,
    help="Trace with Nsight Systems (nsys on PATH) instead of the PyTorch profiler.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, None),
    default=600.0,
    show_default=True,
    help="Seconds before a stuck rank or collective aborts the run.",
)
@debug_option
@handle_errors
def profile(out: str | None, nsys: bool, timeout: float, comm: str, **opts: Any) -> None:
    """Run a reference data-parallel training workload, trace every rank, and analyze it.

    Needs PyTorch (pip install 'traceoverlap[workloads]'). Ranks use gloo on CPU, NCCL on
    GPUs. Each step and phase (forward, backward, grad_sync, optimizer) is an NVTX range
    and a PyTorch profiler range; traces land in OUT/rank{r}.json.gz (with --nsys:
    OUT/report.nsys-rep and OUT/report.sqlite). The analysis table is printed at the end.

    \b
    Examples:
      traceoverlap profile --strategy bucketed --world-size 2 --out runs/bucketed
      traceoverlap profile --strategy naive                # no overlap: compare with bucketed
      traceoverlap profile --strategy ddp --preset medium  # on a GPU node (NCCL)
      traceoverlap profile --strategy bucketed --slow-rank 1 --slow-ms 20
      traceoverlap profile --strategy bucketed --host-delay-ms 60
      traceoverlap profile --strategy naive --model mlp --preset comm-heavy
      traceoverlap profile --strategy ddp --preset large --nsys --out runs/ddp-nsys
      traceoverlap profile --strategy tp --world-size 4 --slow-rank 3 --slow-ms 40 --slow-phase forward
      traceoverlap profile --strategy pipeline --micro-batches 4
      traceoverlap profile --strategy overlap --comm off --out runs/overlap-commoff
    To run under torchrun yourself:
      torchrun --nproc-per-node 8 -m traceoverlap_workloads --strategy ddp --out runs/ddp
    """
    from pathlib import Path

    from ..record.workloads import ProfileOptions, run_profile
    from ..run.analysis import analyze

    options = ProfileOptions(timeout_s=timeout, comm=comm == "on", **opts)
    folder = Path(out or f"runs/{options.strategy}")
    traces = run_profile(options, folder, nsys=nsys)
    _echo_analysis(analyze([str(t) for t in traces]))
    click.echo(f"\ntraces: {folder}/  (next: traceoverlap report {folder} -o report.html)")


@click.command()
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False),
    default="traceoverlap-demo",
    show_default=True,
    help="Folder for the two runs' traces (and HTML reports).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Each run's whole analyze output (its table, what to try, the ranks), not only its "
    "summary.",
)
@debug_option
@handle_errors
def demo(out: str, verbose: bool) -> None:
    """Profile two strategies on this CPU and show what overlap buys (about a minute).

    Runs the tiny GPT on 2 ranks with gloo, once with `naive` gradient sync (after
    backward: nothing hidden) and once `bucketed` (async buckets during backward),
    analyzes both, prints each run's summary and the comparison (about a screen; with
    --verbose each run's whole table and what to try), and writes an HTML report per run.
    Needs PyTorch (pip install 'traceoverlap[workloads]').

    \b
    Examples:
      traceoverlap demo
      traceoverlap demo --out /tmp/demo
    Then:
      traceoverlap analyze traceoverlap-demo/bucketed
      traceoverlap compare traceoverlap-demo/naive traceoverlap-demo/bucketed
    """
    from pathlib import Path

    from ..record.workloads import ProfileOptions, run_profile
    from ..run.analysis import analyze

    root = Path(out)
    results = {}
    for strategy in ("naive", "bucketed"):
        click.echo(f"== {strategy}: profiling 2 ranks on CPU (gloo) ...", err=True)
        options = ProfileOptions(strategy=strategy, backend="gloo", world_size=2, preset="tiny")
        traces = run_profile(options, root / strategy)
        results[strategy] = analyze([str(t) for t in traces])
    tty, width = _terminal()
    write_text(demo_text(results, str(root), color=tty, width=width, verbose=verbose), None)
    for strategy, result in results.items():
        write_page(html_report(result), str(root / strategy / "report.html"))


def demo_text(
    results: dict[str, Any],
    root: str,
    *,
    color: bool = False,
    width: int = 80,
    verbose: bool = False,
) -> str:
    """What ``demo`` prints once both runs are analyzed: each run's summary (with ``verbose``
    its whole analyze output), then the comparison and where the files are; wrapped to
    ``width`` columns."""
    from ..reporters import compare_text as rep
    from ..reporters._format import summary_lines, wrap
    from ..reporters.text import render
    from ..run.compare import compare as compare_runs

    width = max(width, 80)
    parts = []
    for strategy, result in results.items():
        parts.append(f"== {strategy} ({root}/{strategy})")
        if verbose:
            parts.append(render(result, color=color, width=width, verbose=True).rstrip("\n"))
        else:
            for line in summary_lines(result):
                if line.startswith("  most exposed"):  # with --verbose, or analyze
                    continue
                indent = " " * (len(line) - len(line.lstrip(" ")))
                parts += wrap(line.lstrip(" "), width, indent, indent + "    ")
        parts.append("")
    naive, bucketed = results["naive"], results["bucketed"]
    cmp = compare_runs(naive, bucketed, baseline_label="naive", candidate_label="bucketed")
    parts.append("== naive -> bucketed")
    parts.append(rep.render_table(cmp, color=color, width=width).rstrip("\n"))
    parts.append("")
    files = (
        f"traces: {root}/naive/rank*.json.gz and {root}/bucketed/rank*.json.gz; reports: "
        f"{root}/naive/report.html, {root}/bucketed/report.html"
    )
    parts += wrap(files, width, "", "  ")
    if not verbose:
        parts += wrap(
            f"each run's table and what to try: traceoverlap analyze {root}/bucketed (or demo "
            "--verbose)",
            width,
            "",
            "  ",
        )
    return "\n".join(parts) + "\n"
