"""Process limits (issue 41): ``analyze DIR -j 2`` / ``--scheduler local`` under a tight
``ulimit -n`` or ``ulimit -v`` ends, quickly, in one error line or with fewer processes and a note
saying so; never a traceback, never a scheduler that spins printing tracebacks without end (2.9
GB of stderr in 10 minutes), never a cluster that takes for ever to start.

Each case runs the CLI in a subprocess whose limits ``resource.setrlimit`` sets (soft and hard,
as ``ulimit`` does) before it starts, with a timeout, and bounds what it wrote on stderr."""

from __future__ import annotations

import resource
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from conftest import REPO, WORKLOAD_FIXTURES

from traceoverlap.core.errors import UsageError

RANKS = WORKLOAD_FIXTURES / "bucketed"  # two rank files

pytestmark = pytest.mark.timeout(120)


def _limited(which: int, soft: int, hard: int | None = None) -> Callable[[], None]:
    def preexec() -> None:
        resource.setrlimit(which, (soft, soft if hard is None else hard))

    return preexec


def _analyze(preexec: Callable[[], None], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "traceoverlap", "analyze", str(RANKS), *args],
        capture_output=True,
        timeout=90,
        preexec_fn=preexec,
        cwd=REPO,
        check=False,
    )


def _one_line(res: subprocess.CompletedProcess[bytes]) -> str:
    err = res.stderr.decode()
    assert res.returncode == 2, err[-2000:]
    assert len(res.stderr) < 1000 and "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceoverlap: error:"), err
    assert res.stdout == b""
    return lines[0]


def test_processes_under_few_open_files_fall_back_with_a_note() -> None:
    # ulimit -n 12 once ended `-j 2` in a 76-line 'Too many open files' traceback: the pool's
    # queues and pipes need ~8 descriptors and each worker ~3 more, beside what is open already
    res = _analyze(_limited(resource.RLIMIT_NOFILE, 12), "-j", "2")
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert res.stderr == b""
    out = " ".join(res.stdout.decode().split())  # the note may be wrapped
    assert (
        "read the inputs one at a time, not 2 at a time: the open-files limit (ulimit -n 12)"
        in (out)
    )


def test_a_soft_open_files_limit_is_raised_toward_the_hard_one() -> None:
    # soft 12, hard 4096: the map raises its own soft limit (as any process may) and runs
    # 2 processes, with no note
    res = _analyze(_limited(resource.RLIMIT_NOFILE, 12, 4096), "-j", "2")
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert res.stderr == b"" and b"at a time" not in res.stdout


def test_one_process_reads_under_the_same_limits() -> None:
    # -j 1 needs no pool: it reads the folder under both limits, with no note
    for which, soft in [(resource.RLIMIT_NOFILE, 12), (resource.RLIMIT_AS, 250_000 * 1024)]:
        res = _analyze(_limited(which, soft), "-j", "1")
        assert res.returncode == 0, res.stderr.decode()[-2000:]
        assert res.stderr == b"" and b"at a time" not in res.stdout


def test_local_dask_under_few_open_files_is_one_line() -> None:
    # ulimit -n 16: the scheduler spun in its accept loop for ever, printing tracebacks; at 40
    # it hung silently. Refused before anything starts: 64 + 24 per worker
    pytest.importorskip("distributed")
    line = _one_line(
        _analyze(_limited(resource.RLIMIT_NOFILE, 16), "--scheduler", "local", "-j", "2")
    )
    assert (
        "a local Dask cluster of 2 workers needs about 112 open files, and the limit is 16" in line
    )


def test_local_dask_under_little_address_space_is_one_line() -> None:
    # ulimit -v 250000 (KiB): 'Nanny failed to start' / "can't start new thread" tracebacks
    pytest.importorskip("distributed")
    limit = _limited(resource.RLIMIT_AS, 250_000 * 1024)
    line = _one_line(_analyze(limit, "--scheduler", "local", "-j", "2"))
    assert "the address-space limit (ulimit -v 250000) is below the 1.5 GiB" in line


# --- a local cluster that fails to start, or never starts, is one line ---------------------------


class _Client:
    def __init__(self, cluster: object, timeout: str = "") -> None:
        self.cluster = cluster


def test_a_cluster_that_fails_to_start_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import traceoverlap.run.parallel as parallel

    monkeypatch.setattr(parallel, "_check_local_cluster_limits", lambda workers: None)

    class Failing:
        def __init__(self, **kwargs: object) -> None:
            raise RuntimeError("Nanny failed to start.\nmore detail")

    with pytest.raises(UsageError) as err:
        parallel._start_local_cluster(2, _Client, Failing)
    assert str(err.value) == (
        "the local Dask cluster failed to start (Nanny failed to start.): analyse without the "
        "Dask scheduler, or check the process limits (ulimit -a)"
    )


def test_a_cluster_that_never_starts_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    import traceoverlap.run.parallel as parallel

    monkeypatch.setattr(parallel, "_check_local_cluster_limits", lambda workers: None)
    monkeypatch.setattr(parallel, "DASK_START_S", 0.05)
    release = threading.Event()

    class Stuck:
        def __init__(self, **kwargs: object) -> None:
            release.wait(30)

    try:
        with pytest.raises(UsageError, match="did not start within 0.05 s"):
            parallel._start_local_cluster(1, _Client, Stuck)
    finally:
        release.set()


def test_the_limits_check_names_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    # in-process, with the limits read through a stand-in: 1 worker needs 64 + 24 = 88 files
    import traceoverlap.run.parallel as parallel

    monkeypatch.setattr(parallel, "open_files_limit", lambda need: 50)
    with pytest.raises(
        UsageError, match="of 1 worker needs about 88 open files, and the limit is 50"
    ):
        parallel._check_local_cluster_limits(1)
    monkeypatch.setattr(parallel, "open_files_limit", lambda need: None)
    monkeypatch.setattr(parallel, "DASK_MIN_ADDRESS_SPACE", 0)
    parallel._check_local_cluster_limits(64)  # unlimited files, any address space: no error
