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


# --- a Dask map never waits forever (issue 35) --------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dask_with_every_worker_gone_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # the hang of issue 35: the only worker dies and its nanny does not bring it back (a restart
    # that failed on a loaded machine; the nanny logs it and gives up). The nanny of a local
    # cluster lives in this process, so its restart is switched off here; before the watch on
    # the workers this map waited for ever (reproduced: killed by `timeout 60`)
    pytest.importorskip("distributed")
    import distributed.nanny

    import traceoverlap.run.parallel as parallel

    async def no_restart(self: object, exitcode: int) -> None:
        return None

    monkeypatch.setattr(distributed.nanny.Nanny, "_on_worker_exit", no_restart)
    monkeypatch.setattr(parallel, "DASK_NO_WORKERS_S", 2.0)
    files = _files(tmp_path, "oom.json", "a.json")
    with pytest.raises(TraceFormatError) as err:
        list(run_map(files, _killer.task, jobs=1, scheduler="local"))
    msg = str(err.value)
    assert "no Dask worker has been alive for 2 s" in msg and "\n" not in msg
    assert "distributed" not in capfd.readouterr().err


class _Future:
    """A Dask future whose result never comes (or comes after ``ready_after`` polls)."""

    def __init__(self, ready_after: int | None = None, error: BaseException | None = None):
        self.polls = 0
        self.ready_after = ready_after
        self.error = error

    def done(self) -> bool:
        return self.ready_after is not None and self.polls >= self.ready_after

    def result(self, timeout: float | None = None) -> str:
        if self.done():
            if self.error is not None:
                raise self.error
            return "ok"
        self.polls += 1
        raise TimeoutError


class _Client:
    def __init__(self, workers: int) -> None:
        self.workers = workers

    def nthreads(self) -> dict[str, int]:
        return {f"tcp://w{i}:1": 1 for i in range(self.workers)}


def test_dask_result_gives_up_once_no_worker_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    import traceoverlap.run.parallel as parallel

    pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "DASK_POLL_S", 0.0)
    monkeypatch.setattr(parallel, "DASK_NO_WORKERS_S", 0.0)
    with pytest.raises(TraceFormatError, match="no Dask worker has been alive"):
        parallel._dask_result("r0.json", _Future(), _Client(0), "local")


def test_dask_result_waits_while_a_worker_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    # a slow rank with a live worker is waited for: the result of the 5th poll comes back
    import traceoverlap.run.parallel as parallel

    pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "DASK_POLL_S", 0.0)
    monkeypatch.setattr(parallel, "DASK_NO_WORKERS_S", 0.0)
    fut = _Future(ready_after=5)
    assert parallel._dask_result("r0.json", fut, _Client(1), "local") == "ok"
    assert fut.polls == 5


def test_a_task_s_own_timeout_error_is_not_a_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # the task itself raised TimeoutError: the future is done, its error is raised (not taken
    # for "not ready yet" and polled for ever)
    import traceoverlap.run.parallel as parallel

    pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "DASK_POLL_S", 0.0)
    fut = _Future(ready_after=0, error=TimeoutError("the task's own"))
    with pytest.raises(TimeoutError, match="the task's own"):
        parallel._dask_result("r0.json", fut, _Client(1), "local")


def test_a_cancelled_dask_future_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # a scheduler that restarted or went away cancels the futures: one line naming the file
    from concurrent.futures import CancelledError

    import traceoverlap.run.parallel as parallel

    pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "DASK_POLL_S", 0.0)
    fut = _Future(ready_after=0, error=CancelledError("key-123"))
    with pytest.raises(TraceFormatError) as err:
        parallel._dask_result("r0.json", fut, _Client(1), "tcp://head:8786")
    assert str(err.value).startswith(
        "r0.json: the Dask cluster at tcp://head:8786 dropped it before it was read"
    )
