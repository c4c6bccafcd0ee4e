"""What every command shares: one-line errors, the option stack of the analysing commands,
building the library call from it, and writing outputs."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from ..core.errors import TraceoverlapError
from ..core.vocab import DEFAULT_STEP_REGEX, LOST_RATIO, STRAGGLER_RATIO

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
            with _progress_on_terminal():
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


@contextlib.contextmanager
def _progress_on_terminal() -> Iterator[None]:
    """Long work's progress on stderr while the command runs, when stderr is a terminal
    (:mod:`traceoverlap.reporters.progress`); quiet otherwise."""
    from ..core import progress

    if not _isatty(sys.stderr):  # the common case (a pipe, a file, tests): no rich to import
        yield
        return
    from ..reporters.progress import terminal_reporter

    before = progress.install(terminal_reporter())
    try:
        yield
    finally:
        progress.install(before)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


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


# --- shared options -------------------------------------------------------------------------


def analysis_options(func: F) -> F:
    """Options every analysing command shares (analyze, report, export, compare, whatif)."""
    return analysis_options_with()(func)


def analysis_options_with(**helps: str) -> Callable[[F], F]:
    """:func:`analysis_options` with the help of some options replaced (keyed by parameter
    name: ``ranks``, ``lost_threshold``...): what they do for this command."""

    def decorate(func: F) -> F:
        for option in reversed(_analysis_option_list(helps)):
            func = option(func)
        return func

    return decorate


def _analysis_option_list(helps: dict[str, str]) -> list[Callable[[Any], Any]]:
    return [
        click.option(
            "--steps",
            "steps",
            metavar="SPEC",
            help=helps.get(
                "steps",
                "Only these step numbers: 3-7, 3,5, 1010- (from 1010 on) or -5 "
                "(ProfilerStep numbers, or ordinals for --step-regex ranges without a number).",
            ),
        ),
        click.option(
            "--rank",
            "ranks",
            type=int,
            multiple=True,
            metavar="R",
            help=helps.get("ranks", "Only this rank (repeatable)."),
        ),
        click.option(
            "--step-regex",
            metavar="REGEX",
            help=helps.get(
                "step_regex",
                f"Step marker regex (default '{DEFAULT_STEP_REGEX}'); e.g. '^train_step' for "
                "record_function/NVTX ranges. A regex that matches nothing is an error.",
            ),
        ),
        click.option(
            "--comm-pattern",
            "comm_patterns",
            multiple=True,
            metavar="REGEX",
            help=helps.get(
                "comm_patterns",
                "Extra kernel/op names that count as communication (repeatable), e.g. "
                "'my_allreduce'. NCCL/RCCL/HCCL, DeepEP, symmetric-memory, vLLM/TRT-LLM custom "
                "all-reduce, NVSHMEM and MSCCL kernels are known already.",
            ),
        ),
        click.option(
            "--config",
            type=click.Path(dir_okay=False),
            help=helps.get(
                "config",
                "TOML file with [classify] comm_patterns, [steps] step_regex, [thresholds] "
                "lost_ratio, straggler_ratio (docs/cli.md 'Configuration file'); options given "
                "here win.",
            ),
        ),
        click.option(
            "--lost-threshold",
            type=click.FloatRange(0, 1),
            help=helps.get(
                "lost_threshold",
                "A step is compute-bound when the time the device was not computing is below "
                f"this share of the step (default {LOST_RATIO:.2f}).",
            ),
        ),
        click.option(
            "--straggler-threshold",
            type=click.FloatRange(0, 1),
            help=helps.get(
                "straggler_threshold",
                "Name a straggler only when the waiting that traces back to it is at least this "
                f"share of step time (default {STRAGGLER_RATIO:.2f}).",
            ),
        ),
        jobs_option(helps.get("jobs")),
        scheduler_option(helps.get("scheduler")),
        debug_option,
    ]


def jobs_option(help_text: str | None = None) -> Callable[[Any], Any]:
    """``-j/--jobs``: how many processes read the rank files (analyze's, and hang's)."""
    return click.option(
        "-j",
        "--jobs",
        type=click.IntRange(1, None),
        help=help_text
        or (
            "Analyse rank files in N processes (default: min(files, cores) once the inputs "
            "pass 16 MB; 1 for small inputs, where process start-up costs more than it saves)."
        ),
    )


def scheduler_option(help_text: str | None = None) -> Callable[[Any], Any]:
    """``--scheduler``: the per-rank map on Dask (analyze's, and hang's)."""
    return click.option(
        "--scheduler",
        metavar="ADDRESS",
        help=help_text
        or (
            "Run the per-rank analysis on Dask: 'local' (a LocalCluster here, --jobs "
            "workers) or a scheduler address such as tcp://host:8786 (workers read the rank "
            "files themselves; needs pip install 'traceoverlap[dask]')."
        ),
    )


def text_or_json_options(about: str) -> Callable[[F], F]:
    """``--format text|json`` (``about``: what each gives) and ``-o/--output``: the options of
    the commands outside the formats registry (``whatif``, ``hang``)."""

    def add(f: F) -> F:
        f = click.option(
            "-o", "--output", type=click.Path(dir_okay=False), help="Write to a file."
        )(f)
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(["text", "json"]),
            default="text",
            show_default=True,
            help=about,
        )(f)

    return add


def run_analysis(
    paths: tuple[str, ...], graph: bool = False, graph_max_nodes: int | None = None, **opts: Any
) -> Any:
    """Build the library call from CLI options (config file first, explicit options win);
    ``graph``: with the run graph for the what-if, left out past ``graph_max_nodes``."""
    from ..core.options import AnalyzeOptions, Thresholds, load_config
    from ..run.analysis import analyze

    cfg = load_config(opts["config"]) if opts.get("config") else None
    lost = opts.get("lost_threshold")
    late = opts.get("straggler_threshold")
    thresholds = None
    if lost is not None or late is not None:  # each one not given: the config's, else default
        c = cfg or {}
        thresholds = Thresholds(
            lost_ratio=lost if lost is not None else c.get("lost_ratio", LOST_RATIO),
            straggler_ratio=late if late is not None else c.get("straggler_ratio", STRAGGLER_RATIO),
        )
    options = AnalyzeOptions(
        step_regex=opts.get("step_regex"),
        steps=opts.get("steps"),
        ranks=opts.get("ranks") or None,
        comm_patterns=tuple(opts.get("comm_patterns") or ()),
        thresholds=thresholds,
        config=cfg,
        jobs=opts.get("jobs"),
        scheduler=opts.get("scheduler"),
        graph=graph,
        graph_max_nodes=graph_max_nodes,
    )
    return analyze(list(paths), options)


def html_report(
    result: Any,
    plotlyjs: str = "embed",
    step: str | None = None,
    jobs: int | None = None,
    rank: int | None = None,
    whatif: Any = None,
) -> str:
    """The HTML report of ``result``: its parts from the library (the timeline of ``step`` on
    ``rank``, the step across ranks, the what-if where ``result`` holds its run graph: analysed
    with ``graph=True``; or ``whatif``, made before its graphs were dropped), then the page."""
    from ..reporters.html_report import render_parts
    from ..run.detail import report_parts

    parts = report_parts(result, step=step, rank=rank, jobs=jobs)
    w = whatif if whatif is not None else report_whatif(result)
    return render_parts(result, parts, plotlyjs=plotlyjs, whatif=w)


def report_whatif(result: Any) -> Any:
    """The what-if of the HTML report (:func:`traceoverlap.whatif.what_if`, the scenarios
    ``traceoverlap whatif`` runs by default), or a sentence saying why there is none."""
    from ..whatif.graph import run_graph

    if getattr(result, "unit_graphs", None) is None:
        if getattr(result, "run_graph_nodes", 0):
            return (
                f"The what-if was left out: the run graph has {result.run_graph_nodes:,} "
                "activities, whose replays would take minutes; run traceoverlap whatif."
            )
        return "The what-if was not computed for this report; run traceoverlap whatif."
    g = run_graph(result)
    if g is None:
        return "No run graph to replay (no step found): the what-if needs step markers."
    from ..whatif.scenarios import what_if

    return what_if(g)


def write_text(text: str, output: str | None) -> None:
    """``text`` to ``output`` (stdout when None), with a clear error when it cannot be written.

    Text formats lose terminal control sequences and control characters that trace strings may
    hold (:func:`traceoverlap.core.fmt.safe_text`). On a terminal the colours of a
    :class:`~traceoverlap.core.fmt.TerminalText` stay (our own: its console filtered the strings
    it styled); every other escape goes, whatever the text looks like. An HTML page is written
    by :func:`write_page`. An :class:`~traceoverlap.core.fmt.EscapedText` (the JSON outputs)
    holds no control to remove: it is written as it is."""
    from ..core.fmt import EscapedText, TerminalText, safe_text

    if type(text) is EscapedText:
        _write(text, output)
        return
    to_stdout = not output or output == "-"
    own_colours = isinstance(text, TerminalText) and to_stdout and sys.stdout.isatty()
    _write(safe_text(text, keep_sgr=own_colours), output)


def write_page(page: str, output: str | None) -> None:
    """An HTML page to ``output`` (stdout when None) as it is: the page escapes its text itself
    (and embeds plotly.js, whose bytes are left alone). Never decided by looking at the text: a
    text report that happens to start with ``<html`` (a trace named so) is filtered as text."""
    _write(page, output)


def _write(text: str, output: str | None) -> None:
    from ..reporters.outputs import write_output, writing_stdout

    to_stdout = not output or output == "-"
    if to_stdout:
        with writing_stdout() as out:  # a full disk or `ulimit -f` is an error, not a cut file
            out.write(text.encode(sys.stdout.encoding or "utf-8", "replace"))
        return

    write_output(text, str(output))


def check_outputs(outputs: list[str | None], paths: tuple[str, ...], opts: dict[str, Any]) -> None:
    """Refuse, before analysing, outputs that would replace an input (traceoverlap.reporters.outputs)."""
    from ..reporters.outputs import check_outputs as check

    check(outputs, [*paths, *([opts["config"]] if opts.get("config") else [])])


def _terminal() -> tuple[bool, int]:
    """Is standard output a terminal, and its width: the terminal's, else ``$COLUMNS`` when set
    (a pipe to a pager, the docs' examples), else 80; never under 40."""
    import shutil

    tty = sys.stdout.isatty()
    if tty:
        return tty, max(40, shutil.get_terminal_size((80, 24)).columns)
    columns = os.environ.get("COLUMNS", "")
    return tty, max(40, int(columns)) if columns.isdigit() else 80


def _echo_analysis(result: Any) -> None:
    from ..reporters.text import render as render_text

    tty, width = _terminal()
    write_text(render_text(result, color=tty, width=width), None)


def format_options(kind: str, about: str) -> Callable[[F], F]:
    """``-f/--format`` with the choices of the reporters' registry for ``kind`` (``analysis``,
    ``compare``) and ``-o FILE``, whose suffix chooses the format when ``--format`` is not given
    (:func:`traceoverlap.reporters.formats.choose`); ``about``: what the command's formats hold."""
    from ..reporters.formats import formats, suffix_help

    options = [
        click.option(
            "-f",
            "--format",
            "fmt",
            type=click.Choice(list(formats(kind))),
            help=f"Output format. Default: from -o FILE's suffix ({suffix_help(kind)}), else "
            f"table; --format always wins. {about}",
        ),
        click.option(
            "-o",
            "--output",
            type=click.Path(dir_okay=False),
            help="Write to FILE instead of stdout (its suffix chooses the format).",
        ),
    ]

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate
