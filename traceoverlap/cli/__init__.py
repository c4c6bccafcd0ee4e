"""The ``traceoverlap`` command line: a thin click layer over the library.

Only this module imports click. Library errors (:class:`TraceoverlapError`) become one line on
stderr and the error's exit code here, at the boundary; ``--debug`` (before or after the command
name) shows the traceback instead. Nothing heavy is imported until a command runs, so ``--help``
and ``--version`` answer at once.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._version import __version__
from ..core.errors import TraceoverlapError, UsageError
from ..core.vocab import DEFAULT_STEP_REGEX, GLOO_LOOPS, LOST_RATIO, SLOW_PHASES

F = TypeVar("F", bound=Callable[..., Any])


def _debug_wanted(ctx: click.Context) -> bool:
    return bool(ctx.find_root().params.get("debug")) or bool(ctx.params.get("debug"))


def handle_errors(func: F) -> F:
    """Turn library errors into one clear line and a non-zero exit (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        kwargs.pop("debug", None)
        debug = _debug_wanted(ctx)
        try:
            return func(*args, **kwargs)
        except TraceoverlapError as exc:
            if debug:
                raise
            from ..core.fmt import safe_text

            click.echo(f"traceoverlap: error: {safe_text(str(exc))}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("traceoverlap: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # the reader went away (`| head`): not an error of ours; silence the final flush
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(0)
        except MemoryError:
            if debug:
                raise
            click.echo(f"traceoverlap: error: {_out_of_memory(kwargs)}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def _out_of_memory(kwargs: dict[str, Any]) -> str:
    """The out-of-memory line: naming the input; Dask advice only when there are several ranks
    to spread (a folder, several files)."""
    paths = list(kwargs.get("paths") or ()) or [
        p for p in (kwargs.get("baseline"), kwargs.get("candidate")) if p
    ]
    several = len(paths) > 1 or any(os.path.isdir(p) for p in paths)
    where = f"{', '.join(paths)[:300]}: " if paths else ""
    advice = (
        "analyse fewer ranks at once (--rank), or spread them over a Dask cluster (--scheduler)"
        if several
        else "free memory, or analyse it on a machine with more"
    )
    return f"{where}out of memory; {advice}"


debug_option = click.option(
    "--debug", is_flag=True, help="Show full tracebacks instead of one-line errors."
)


class _OneLineErrors(click.Group):
    """click's own errors (an unknown option, a bad value, a missing argument) as one line, like
    every other error: ``traceoverlap: error: ... (see `traceoverlap analyze --help`)``."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `traceoverlap`: the help
                click.echo(exc.format_message())
                sys.exit(exc.exit_code)
            where = exc.ctx.command_path if exc.ctx is not None else "traceoverlap"
            msg = " ".join(exc.format_message().split())
            click.echo(f"traceoverlap: error: {msg} (see `{where} --help`)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"traceoverlap: error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("traceoverlap: interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(
    cls=_OneLineErrors,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="traceoverlap")
@debug_option
def main(debug: bool) -> None:
    """How much of your distributed-training communication is hidden behind computation,
    how much is exposed, and why.

    \b
    Start here:
      traceoverlap analyze trace.json.gz          per-rank, per-step table + what to try
      traceoverlap analyze runs/bucketed/         a folder of rank traces
      traceoverlap analyze report.sqlite          an Nsight Systems SQLite export
      traceoverlap report runs/x -o report.html   offline HTML timeline report
      traceoverlap export runs/x -o run.json      the run on one clock, for ui.perfetto.dev
      traceoverlap compare runs/naive runs/bucketed
      traceoverlap profile --strategy bucketed --world-size 2 --out runs/bucketed
      traceoverlap demo                           profile + analyze two strategies on CPU
    """


# --- shared options -------------------------------------------------------------------------


def analysis_options(func: F) -> F:
    """Options every analysing command shares (analyze, report, compare)."""
    options = [
        click.option(
            "--steps",
            "steps",
            metavar="SPEC",
            help="Only these step numbers: 3-7, 3,5, 1010- (from 1010 on) or -5 "
            "(ProfilerStep numbers, or ordinals for --step-regex ranges without a number).",
        ),
        click.option(
            "--rank",
            "ranks",
            type=int,
            multiple=True,
            metavar="R",
            help="Only this rank (repeatable).",
        ),
        click.option(
            "--step-regex",
            metavar="REGEX",
            help=f"Step marker regex (default '{DEFAULT_STEP_REGEX}'); e.g. '^train_step' for "
            "record_function/NVTX ranges. A regex that matches nothing is an error.",
        ),
        click.option(
            "--comm-pattern",
            "comm_patterns",
            multiple=True,
            metavar="REGEX",
            help="Extra kernel/op names that count as communication (repeatable), e.g. "
            "'my_allreduce'. NCCL/RCCL/HCCL, DeepEP, symmetric-memory, vLLM/TRT-LLM custom "
            "all-reduce, NVSHMEM and MSCCL kernels are known already.",
        ),
        click.option(
            "--config",
            type=click.Path(dir_okay=False),
            help="TOML file with [classify] comm_patterns, [steps] step_regex, [thresholds] "
            "lost_ratio (README 'Configuration'); options given here win.",
        ),
        click.option(
            "--lost-threshold",
            type=click.FloatRange(0, 1),
            help="A step is compute-bound when the time the device was not computing is below "
            f"this share of the step (default {LOST_RATIO:.2f}).",
        ),
        click.option(
            "-j",
            "--jobs",
            type=click.IntRange(1, None),
            help="Analyse rank files in N processes (default: min(files, cores) once the inputs "
            "pass 16 MB; 1 for small inputs, where process start-up costs more than it saves).",
        ),
        click.option(
            "--scheduler",
            metavar="ADDRESS",
            help="Run the per-rank analysis on Dask: 'local' (a LocalCluster here, --jobs "
            "workers) or a scheduler address such as tcp://host:8786 (workers read the rank "
            "files themselves; needs pip install 'traceoverlap[dask]').",
        ),
        debug_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def run_analysis(paths: tuple[str, ...], graph: bool = False, **opts: Any) -> Any:
    """Build the library call from CLI options (config file first, explicit options win)."""
    from ..core.options import AnalyzeOptions, Thresholds, load_config
    from ..run.analysis import analyze

    cfg = load_config(opts["config"]) if opts.get("config") else None
    lost = opts.get("lost_threshold")
    options = AnalyzeOptions(
        step_regex=opts.get("step_regex"),
        steps=opts.get("steps"),
        ranks=opts.get("ranks") or None,
        comm_patterns=tuple(opts.get("comm_patterns") or ()),
        thresholds=Thresholds(lost_ratio=lost) if lost is not None else None,
        config=cfg,
        jobs=opts.get("jobs"),
        scheduler=opts.get("scheduler"),
        graph=graph,
        graph_max_nodes=WHATIF_MAX_NODES if graph else None,
    )
    return analyze(list(paths), options)


def html_report(
    result: Any,
    plotlyjs: str = "embed",
    step: str | None = None,
    jobs: int | None = None,
    rank: int | None = None,
) -> str:
    """The HTML report of ``result``: the timeline of ``step`` on ``rank`` (None: the lowest
    rank's median step), and the step across ranks when it has several ranks."""
    from pathlib import Path

    from ..reporters.html_report import render as render_html
    from ..run.detail import step_detail

    detail = step_detail(result, rank, step)
    across = None
    # the step across ranks reads the rank files again: not possible from standard input
    if result.multi_rank and all(Path(t.path).is_file() for t in result.traces):
        from ..run.across import step_across

        across = step_across(result, step, detail=detail, jobs=jobs)
    return str(render_html(result, plotlyjs=plotlyjs, across=across, detail=detail))


def write_text(text: str, output: str | None) -> None:
    """``text`` to ``output`` (stdout when None), with a clear error when it cannot be written.

    Text formats lose terminal control sequences and control characters that trace strings may
    hold (:func:`traceoverlap.core.fmt.safe_text`; our own colours stay on a terminal); an HTML page
    escapes its text itself (and embeds plotly.js, which is left alone)."""
    from ..core.fmt import safe_text

    to_stdout = not output or output == "-"
    if not text[:100].lstrip().lower().startswith(("<!doctype html", "<html")):
        text = safe_text(text, keep_sgr=to_stdout and sys.stdout.isatty())
    if to_stdout:
        click.echo(text, nl=False)
        return
    from ..reporters.outputs import write_output

    write_output(text, str(output))


def check_outputs(outputs: list[str | None], paths: tuple[str, ...], opts: dict[str, Any]) -> None:
    """Refuse, before analysing, outputs that would replace an input (traceoverlap.reporters.outputs)."""
    from ..reporters.outputs import check_outputs as check

    check(outputs, [*paths, *([opts["config"]] if opts.get("config") else [])])


def _terminal() -> tuple[bool, int]:
    import shutil

    tty = sys.stdout.isatty()
    return tty, shutil.get_terminal_size((80, 24)).columns if tty else 80


# --- analyze --------------------------------------------------------------------------------


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv", "markdown"]),
    default="table",
    show_default=True,
    help="Output format. json has a stable schema (README 'JSON schema').",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout."
)
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False), help="Also write the HTML report."
)
@click.option(
    "--fail-if",
    "fail_if",
    multiple=True,
    metavar="COND",
    help="Exit 3 when COND holds for the run, e.g. 'exposed_comm_ratio>0.2' or "
    "'exposed_wait_ns>5ms' (README 'CI gate').",
)
@analysis_options
@handle_errors
def analyze(
    paths: tuple[str, ...],
    fmt: str,
    output: str | None,
    html_path: str | None,
    fail_if: tuple[str, ...],
    **opts: Any,
) -> None:
    """Per-rank, per-step overlap of communication and computation, and why.

    PATHS: a Kineto trace (.json / .json.gz), an Nsight Systems export (.sqlite, or .nsys-rep
    with nsys installed), several of them, or a folder of rank traces.

    \b
    For every (rank, step): step time split into compute, exposed communication,
    memory copies and idle; how much communication was hidden behind compute;
    why the exposed part was exposed (waiting for a late peer, nothing left to
    compute, compute waiting for it, host not ready); the verdict with the
    numbers that decided it; then what to try.

    \b
    Examples:
      traceoverlap analyze rank0.json.gz
      traceoverlap analyze runs/bucketed/ --format json -o result.json
      traceoverlap analyze trace.json --steps 3-7 --rank 0
      traceoverlap analyze trace.json --step-regex '^train_step'
      traceoverlap analyze runs/x/ --fail-if 'exposed_comm_ratio>0.2'
      traceoverlap analyze runs/job/ -j 8                        # 8 local processes
      traceoverlap analyze /shared/job/ --scheduler tcp://head:8786   # a Dask cluster
    """
    from ..run.gate import failed_conditions, parse_conditions

    conditions = parse_conditions(fail_if)  # validate before the (possibly long) analysis
    check_outputs([output, html_path], paths, opts)
    what = fmt in ("table", "markdown")
    result = run_analysis(paths, graph=what, **opts)
    if what:
        result = with_what_if(result)
    if fmt == "json":
        from ..reporters.json_report import render as render_json

        text = render_json(result)
    elif fmt == "csv":
        from ..reporters.csv_report import render as render_csv

        text = render_csv(result)
    elif fmt == "markdown":
        from ..reporters.markdown import render as render_md

        text = render_md(result)
    else:
        from ..reporters.text import render as render_text

        tty, width = _terminal()
        text = render_text(result, color=tty and output is None, width=width)
    write_text(text, output)
    if html_path:
        write_text(html_report(result, jobs=opts.get("jobs")), html_path)
        click.echo(f"wrote {html_path}", err=True)
    failed = failed_conditions(conditions, result.summary.run)
    if failed:
        from ..core.errors import GateFailed

        raise GateFailed("fail-if met: " + "; ".join(failed))


def with_what_if(result: Any) -> Any:
    """The analysis with its top counterfactuals (docs/whatif.md §3) for "What to try", replayed
    on the run graph the analysis built in the same read; left out, with a line saying so, when
    the graph has more than :data:`WHATIF_MAX_NODES` nodes."""
    import dataclasses

    from ..reporters.whatif_report import top_lines
    from ..whatif.graph import run_graph
    from ..whatif.scenarios import what_if

    g = run_graph(result)
    lines: tuple[str, ...] = ()
    if result.run_graph_nodes > WHATIF_MAX_NODES:
        lines = (
            f"what-if left out: the run graph has {result.run_graph_nodes:,} activities (more "
            f"than {WHATIF_MAX_NODES:,}: its replays would take minutes); run traceoverlap whatif",
        )
    elif g is not None:
        try:
            lines = tuple(top_lines(what_if(g)))
        except TraceoverlapError:
            lines = ()
    return dataclasses.replace(result, what_if=lines, unit_graphs=None)


#: analyze replays the run graph for "What to try" up to this many nodes: about 15 replays (the
#: scenarios and a fix-rank row per rank that matters) at ~4 µs per node each
#: (benchmarks/bench_replay.py: 86 s for 20.5 M nodes on 2 cores): about a minute at the limit.
WHATIF_MAX_NODES = 1_000_000


# --- compare --------------------------------------------------------------------------------


@main.command()
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
    help="Output format. json has a top-level step_speedup.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout."
)
@click.option(
    "--top",
    type=click.IntRange(0, None),
    default=10,
    show_default=True,
    help="How many collectives whose exposure changed most to list.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write a side-by-side HTML report (the comparison, then both runs' reports).",
)
@analysis_options
@handle_errors
def compare(
    baseline: str,
    candidate: str,
    fmt: str,
    output: str | None,
    top: int,
    html_path: str | None,
    **opts: Any,
) -> None:
    """What an optimisation changed: BASELINE vs CANDIDATE (each a trace file or a folder of
    rank traces), median per step side by side.

    \b
    Step time, compute, communication, overlap ratio, exposed communication and why
    it was exposed, memory and idle; deltas; step_speedup = baseline median step /
    candidate median step; whether the verdict changed; the collectives whose
    exposure changed most. The same options (--steps, --rank, ...) apply to both.

    \b
    Examples:
      traceoverlap compare runs/naive runs/bucketed
      traceoverlap compare before.json.gz after.json.gz --format json
      traceoverlap compare runs/naive runs/bucketed --html compare.html
    """
    from ..reporters import compare_text as rep
    from ..run.compare import compare as compare_runs

    check_outputs([output, html_path], (baseline, candidate), opts)
    base = run_analysis((baseline,), **opts)
    cand = run_analysis((candidate,), **opts)
    cmp = compare_runs(base, cand, baseline_label=baseline, candidate_label=candidate, top=top)
    if fmt == "json":
        text = rep.render_json(cmp)
    elif fmt == "markdown":
        text = rep.render_markdown(cmp)
    else:
        tty, width = _terminal()
        text = rep.render_table(cmp, color=tty and output is None, width=width)
    write_text(text, output)
    if html_path:
        from ..reporters.compare_html import render as render_compare
        from ..run.detail import step_detail

        details = (step_detail(base), step_detail(cand))
        write_text(render_compare(cmp, details=details), html_path)
        click.echo(f"wrote {html_path}", err=True)


# --- report ---------------------------------------------------------------------------------


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="report.html",
    show_default=True,
    help="The HTML file to write.",
)
@click.option(
    "--timeline-step",
    metavar="N",
    help="Step drawn as a timeline (its ProfilerStep number; default: the median step).",
)
@click.option(
    "--timeline-rank",
    type=int,
    metavar="R",
    help="Rank whose step is drawn as a timeline (default: the lowest rank).",
)
@click.option(
    "--plotlyjs",
    type=click.Choice(["embed", "cdn"]),
    default="embed",
    show_default=True,
    help="embed: plotly.js inside the file (works offline, ~5 MB); cdn: small file, needs the network.",
)
@analysis_options
@handle_errors
def report(
    paths: tuple[str, ...],
    output: str,
    timeline_step: str | None,
    timeline_rank: int | None,
    plotlyjs: str,
    **opts: Any,
) -> None:
    """Write an offline HTML report: summary, what to try, per-step bars, one step's timeline.

    PATHS: trace files or folders, as for `analyze`.

    \b
    Examples:
      traceoverlap report rank0.json.gz -o report.html
      traceoverlap report runs/bucketed/ --timeline-step 5 --timeline-rank 1
      traceoverlap report trace.json --plotlyjs cdn -o small.html
    """
    check_outputs([output], paths, opts)
    result = run_analysis(paths, **opts)
    page = html_report(result, plotlyjs, timeline_step, opts.get("jobs"), timeline_rank)
    write_text(page, output)
    click.echo(f"wrote {output}", err=True)


# --- export: the run on one clock for Perfetto (issue 23) -----------------------------------


@main.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o", "--output", required=True, metavar="FILE", help="Trace Event Format JSON to write."
)
@analysis_options
@handle_errors
def export_cmd(paths: tuple[str, ...], output: str, **opts: Any) -> None:
    """Write the run on one clock as a trace for ui.perfetto.dev / chrome://tracing.

    One process per rank (clock offsets removed), its threads and streams as tracks, and
    analysis tracks on top: steps, exposed communication by cause, collective instances, and
    waits with an arrow to the rank waited for.

    \b
    Examples:
      traceoverlap export runs/bucketed/ -o run.json      then open run.json in ui.perfetto.dev
    """
    from ..reporters.perfetto import write_trace

    check_outputs([output], paths, opts)
    result = run_analysis(paths, **opts)
    try:
        # O_NONBLOCK: a named pipe nobody reads is an error (ENXIO), not a hang
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o666)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as fh:
            stats = write_trace(result, fh)
    except OSError as exc:
        raise UsageError(
            f"{output}: cannot write the output ({exc.strerror or exc}); check that the folder "
            "exists and is writable"
        ) from None
    n = sum(stats.events.values())
    click.echo(
        f"wrote {output}: {len(stats.events)} ranks, {n:,} events, {stats.flows} wait arrows",
        err=True,
    )


# --- whatif (issue 22) ----------------------------------------------------------------------


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    metavar="NAME",
    help="replay, no-straggler, fix-rank:R, hide:FAMILY, comm-speed:F, no-host-gaps, "
    "no-overlap-tax (repeatable; default: every one that applies).",
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to a file.")
@click.option("--step-regex", metavar="REGEX", help="Step marker regex (as for analyze).")
@click.option("-j", "--jobs", type=click.IntRange(1, None), help="Local processes for the map.")
@debug_option
@handle_errors
def whatif(
    paths: tuple[str, ...],
    scenarios: tuple[str, ...],
    fmt: str,
    output: str | None,
    step_regex: str | None,
    jobs: int | None,
) -> None:
    """What fixing it would buy: replay the run graph with a change (docs/whatif.md).

    \b
    Examples:
      traceoverlap whatif runs/slow_rank/
      traceoverlap whatif runs/job/ --scenario fix-rank:3 --scenario comm-speed:2
      traceoverlap whatif runs/job/ --format json -o whatif.json
    """
    from ..reporters.whatif_report import render_json, render_text
    from ..whatif.scenarios import load_graph, what_if

    check_outputs([output], paths, {})
    w = what_if(load_graph(list(paths), step_regex=step_regex, jobs=jobs), scenarios or None)
    write_text(render_json(w) if fmt == "json" else render_text(w), output)


# --- profile and demo (issue 3) -------------------------------------------------------------


def _echo_analysis(result: Any) -> None:
    from ..reporters.text import render as render_text

    tty, width = _terminal()
    write_text(render_text(result, color=tty, width=width), None)


@main.command()
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


@main.command()
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False),
    default="traceoverlap-demo",
    show_default=True,
    help="Folder for the two runs' traces (and HTML reports).",
)
@debug_option
@handle_errors
def demo(out: str) -> None:
    """Profile two strategies on this CPU and show what overlap buys (about a minute).

    Runs the tiny GPT on 2 ranks with gloo, once with `naive` gradient sync (after
    backward: nothing hidden) and once `bucketed` (async buckets during backward),
    analyzes both, prints both tables and the comparison, and writes an HTML report
    per run. Needs PyTorch (pip install 'traceoverlap[workloads]').

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
        click.echo(f"\n== {strategy} ({root / strategy})")
        _echo_analysis(results[strategy])

    from ..reporters import compare_text as rep
    from ..run.compare import compare as compare_runs

    click.echo("\n== naive -> bucketed")
    cmp = compare_runs(
        results["naive"], results["bucketed"], baseline_label="naive", candidate_label="bucketed"
    )
    tty, width = _terminal()
    write_text(rep.render_table(cmp, color=tty, width=width), None)

    for strategy, result in results.items():
        write_text(html_report(result), str(root / strategy / "report.html"))
    click.echo(
        f"\ntraces: {root / 'naive'}/rank*.json.gz and {root / 'bucketed'}/rank*.json.gz; "
        f"reports: {root / 'naive' / 'report.html'}, {root / 'bucketed' / 'report.html'}"
    )
