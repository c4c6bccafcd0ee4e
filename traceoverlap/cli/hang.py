"""`traceoverlap hang`: why is it stuck, from the ranks' Flight Recorder dumps (issue 39)."""

from __future__ import annotations

from typing import Any

import click

from ._common import (
    _terminal,
    check_outputs,
    handle_errors,
    jobs_option,
    scheduler_option,
    text_or_json_options,
    write_text,
)


@click.command()
@click.argument("dumps", nargs=-1, required=True, type=click.Path())
@text_or_json_options(
    "text: the answer, the evidence, the tables; json: the same as data (docs/hang.md)."
)
@click.option(
    "--traces",
    "traces",
    type=click.Path(),
    help="Kineto or Nsight Systems traces of the same run (a folder or files): adds what the "
    "ranks named in the answer had their host doing in their last traced step.",
)
@jobs_option(
    "Read the rank dumps in N processes (default: min(files, cores) once the dumps pass 16 MB; "
    "1 for small sets, where process start-up costs more than it saves)."
)
@scheduler_option(
    "Read the rank dumps on Dask: 'local' (a LocalCluster here, --jobs workers) or a scheduler "
    "address such as tcp://host:8786 (workers read the files themselves; needs pip install "
    "'traceoverlap[dask]')."
)
@handle_errors
def hang(
    dumps: tuple[str, ...],
    fmt: str,
    output: str | None,
    traces: str | None,
    jobs: int | None,
    scheduler: str | None,
) -> None:
    """Why is it stuck: which rank the others wait for, and what it did instead, from the
    ranks' PyTorch Flight Recorder dumps (docs/hang.md).

    DUMPS are the dump files, or folders of them: one file per rank, named <prefix><rank>
    (fr_0, fr_1, ...; a .json twin or other suffix is fine), pickle or JSON.

    \b
    What a Flight Recorder dump is: each rank's ring buffer of its last collectives and
    send/recvs (process group, sequence id, op, sizes, dtypes, state, times, stack), kept by
    torch.distributed when TORCH_FR_BUFFER_SIZE is set (e.g. 2000 entries).
    \b
    How to get one:
      export TORCH_FR_BUFFER_SIZE=2000          before the job starts, on every rank
      export TORCH_FR_DUMP_TEMP_FILE=/tmp/fr_   where the dumps go (<prefix><rank>)
      NCCL: the watchdog dumps every rank on a collective timeout
        (TORCH_NCCL_DUMP_ON_TIMEOUT=1)
      any backend, from your code (e.g. in an except around the timed-out call):
        open(f"fr_{rank}", "wb").write(
            torch._C._distributed_c10d._dump_fr_trace())
    \b
    The first line is the answer: the group, the sequence id, the rank(s) and what they did
    instead (never called it; called something else; other sizes; waiting in another
    group or a recv, followed to the rank at the end), or that nothing is stuck. Ranks that
    dumped nothing are named: one of them may be the one stuck.
    \b
    Examples:
      traceoverlap hang /tmp/fr_dumps/
      traceoverlap hang fr_0 fr_1 fr_2 fr_3 --format json -o hang.json
    """
    check_outputs([output], dumps, {})
    try:
        from ..run.flightrec import read_dumps
    except ImportError as exc:  # the reader is a separate piece (issue 39)
        from ..core.errors import UsageError

        raise UsageError(
            f"{dumps[0]}: this build cannot read Flight Recorder dumps (no reader: {exc})"
        ) from None
    from ..reporters.hang_report import render_json, render_text
    from ..run.hang import diagnose_hang

    report = diagnose_hang(read_dumps(list(dumps), jobs=jobs, scheduler=scheduler))
    if traces:
        report = _with_traces(report, traces)
    write_text(
        render_json(report) if fmt == "json" else render_text(report, _terminal()[1]), output
    )


def _with_traces(report: Any, traces: str) -> Any:
    """The report with a line per blamed rank from the traces (docs/hang.md, "With traces")."""
    from ..rank.hosttrace import last_step_summary
    from ..run.analysis import load
    from ..run.hang import with_evidence, with_note

    if not report.culprits:
        return with_note(report, f"--traces {traces}: the answer names no rank to look up")
    ev = load(traces).events
    lines = []
    for rank, pg, seq in report.culprits[:8]:
        line = last_step_summary(ev, rank, pg, seq)
        lines.append(line or f"rank {rank}: no events in the traces given ({traces})")
    return with_evidence(report, lines)
