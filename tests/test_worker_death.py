"""A worker that dies reading a rank (issue 21): one error naming the file, not a
BrokenProcessPool / KilledWorker traceback; Dask's own logging stays off stderr; bad scheduler
addresses are one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _killer  # noqa: E402

from traceoverlap.core.errors import TraceFormatError, UsageError
from traceoverlap.run.parallel import run_map


def _files(tmp_path: Path, *names: str) -> list[Path]:
    out = []
    for n in names:
        (tmp_path / n).write_bytes(b"x" * 2048)
        out.append(tmp_path / n)
    return out


def test_processes_name_the_file_whose_worker_died(tmp_path: Path) -> None:
    files = _files(tmp_path, "a.json", "oom.json", "b.json")
    with pytest.raises(TraceFormatError) as err:
        list(run_map(files, _killer.task, jobs=2))
    msg = str(err.value)
    # the culprit is found by re-reading the unfinished files alone: a.json is never blamed
    assert msg.startswith(f"{files[1]}: the worker process reading it died")
    assert "the file is 2.0 KiB" in msg and "memory" in msg and "\n" not in msg


def test_files_that_only_failed_beside_the_dead_one_get_their_results(tmp_path: Path) -> None:
    # without the killer every file succeeds, also after a pool broke: re-read one at a time
    files = _files(tmp_path, "a.json", "b.json", "c.json")
    assert list(run_map(files, _killer.task, jobs=2)) == ["ok a.json", "ok b.json", "ok c.json"]


@pytest.mark.slow
def test_dask_killed_worker_is_one_line_and_quiet(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    files = _files(tmp_path, "a.json", "oom.json")
    with pytest.raises(TraceFormatError) as err:
        list(run_map(files, _killer.task, jobs=1, scheduler="local"))
    assert str(err.value).startswith(f"{files[1]}: the Dask workers reading it died")
    assert "distributed" not in capfd.readouterr().err


@pytest.mark.slow
def test_dask_workers_start_with_distributed_logging_off(tmp_path: Path) -> None:
    # the workers a local cluster starts (and restarts) configure distributed's logging when they
    # import it: the map hands them Dask's logging.distributed = critical through the
    # environment, and gives the caller's environment back afterwards
    import logging
    import os

    pytest.importorskip("distributed")
    from traceoverlap.run.parallel import DASK_LOG_ENV

    before = os.environ.get(DASK_LOG_ENV)
    files = _files(tmp_path, "a.json")
    got = list(run_map(files, _killer.log_level, jobs=1, scheduler="local"))
    assert got == [f"{logging.CRITICAL} critical"]
    assert os.environ.get(DASK_LOG_ENV) == before


@pytest.mark.parametrize("address", ["foo", "tcp://head", "http://head:8786", "tcp://"])
def test_bad_scheduler_address_is_one_line(tmp_path: Path, address: str) -> None:
    pytest.importorskip("distributed")
    files = _files(tmp_path, "a.json")
    with pytest.raises(UsageError, match="expected 'local' or a Dask scheduler address"):
        list(run_map(files, _killer.task, scheduler=address))


def test_out_of_memory_names_the_file_without_dask_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner
    from test_cli_analyze import write_trace

    import traceoverlap.readers as readers
    from traceoverlap.cli import main

    trace = write_trace(tmp_path / "rank0.json")

    def no_memory(path: object, *args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(readers, "read_trace", no_memory)
    res = CliRunner().invoke(main, ["analyze", str(trace)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"traceoverlap: error: {trace}: out of memory")
    assert "Dask" not in lines[0] and "scheduler" not in lines[0]


def test_dask_client_logging_is_quiet_while_mapping(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # distributed.client has a level and a handler of its own: a "Couldn't gather keys" warning
    # it logs during the map must not reach stderr; its level is back afterwards
    pytest.importorskip("distributed")
    import logging

    import traceoverlap.run.parallel as inputs

    client_log = logging.getLogger("distributed.client")
    before = client_log.level

    def fake_run(names, task, scheduler, jobs, client, cluster):  # noqa: ANN001, ANN202
        client_log.warning("Couldn't gather 1 keys, rescheduling")
        yield "ok"

    mp = pytest.MonkeyPatch()
    mp.setattr(inputs, "_dask_run", fake_run)
    try:
        files = _files(tmp_path, "a.json")
        assert list(run_map(files, _killer.task, scheduler="tcp://head:8786")) == ["ok"]
    finally:
        mp.undo()
    assert "gather" not in capfd.readouterr().err
    assert client_log.level == before


def test_out_of_memory_after_reading_names_the_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a MemoryError outside the per-file map (the cross-rank reduce): the CLI's own line names
    # the input, and gives Dask advice only for a folder of ranks
    from click.testing import CliRunner
    from test_cli_analyze import write_trace

    import traceoverlap.run.analysis as analysis
    from traceoverlap.cli import main

    def no_memory(*a: object, **k: object) -> None:
        raise MemoryError

    monkeypatch.setattr(analysis, "_reduce", no_memory)
    trace = write_trace(tmp_path / "rank0.json")
    res = CliRunner().invoke(main, ["analyze", str(trace)])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"traceoverlap: error: {trace}: out of memory; free memory, or analyse it on a machine "
        "with more"
    )
    res = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert "--scheduler" in res.output and str(tmp_path) in res.output
