"""The command's quick exit (``traceoverlap.__main__.run``): same exit codes, complete output,
exit handlers run; anything unusual takes the normal exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from traceoverlap import __main__ as entry

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "workloads" / "ddp"


def _run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = (
        [sys.executable, "-m", "traceoverlap", *args]
        if code is None
        else [
            sys.executable,
            "-c",
            code,
            *args,
        ]
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_output_to_a_pipe_is_complete(tmp_path: Path) -> None:
    piped = _run("analyze", str(FIXTURE), "--format", "json")
    assert piped.returncode == 0, piped.stderr
    out = tmp_path / "a.json"
    written = _run("analyze", str(FIXTURE), "--format", "json", "-o", str(out))
    assert written.returncode == 0, written.stderr
    # the whole document came through the pipe: the same as the file, which parses
    assert piped.stdout == out.read_text(encoding="utf-8")
    assert json.loads(piped.stdout)["traces"]


def test_error_exit_code_and_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    out = _run("analyze", str(bad))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and str(bad) in out.stderr


def test_exit_handlers_run_before_the_quick_exit() -> None:
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('handler ran', flush=False))\n"
        "from traceoverlap.__main__ import run\n"
        "sys.argv = ['traceoverlap', '--version']\n"
        "run()\n"
    )
    out = _run(code=code)
    assert out.returncode == 0, out.stderr
    assert "traceoverlap" in out.stdout and out.stdout.rstrip().endswith("handler ran")


def test_a_message_exit_takes_the_normal_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    def main() -> None:
        raise SystemExit("a message, not a code")

    monkeypatch.setattr(entry, "main", main)
    with pytest.raises(SystemExit) as exc:
        entry.run()
    assert exc.value.code == "a message, not a code"


def test_a_running_thread_takes_the_normal_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()

    def main() -> None:
        raise SystemExit(0)

    monkeypatch.setattr(entry, "main", main)
    try:
        with pytest.raises(SystemExit) as exc:
            entry.run()
        assert exc.value.code == 0
    finally:
        stop.set()
        worker.join()


def test_the_command_asks_openblas_for_one_thread() -> None:
    # numpy's OpenBLAS starts a thread per core at import; the analysis does no linear algebra:
    # the command sets OPENBLAS_NUM_THREADS=1 before numpy loads, unless the user chose a value
    code = (
        "import os, sys\n"
        "from traceoverlap.__main__ import run\n"
        "import atexit\n"
        "atexit.register(lambda: print('blas', os.environ.get('OPENBLAS_NUM_THREADS')))\n"
        "sys.argv = ['traceoverlap', 'analyze', sys.argv[1], '--format', 'json', '-o', "
        "os.devnull]\n"
        "run()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    ours = subprocess.run(
        [sys.executable, "-c", code, str(FIXTURE)], capture_output=True, text=True, env=env
    )
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.strip() == "blas 1"
    theirs = subprocess.run(
        [sys.executable, "-c", code, str(FIXTURE)],
        capture_output=True,
        text=True,
        env={**env, "OPENBLAS_NUM_THREADS": "4"},
    )
    assert theirs.returncode == 0 and theirs.stdout.strip() == "blas 4"


def test_programs_started_for_the_user_get_their_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from traceoverlap.core import _blas

    monkeypatch.delenv(_blas.VAR, raising=False)
    monkeypatch.delitem(sys.modules, "numpy", raising=False)  # as before numpy is imported
    monkeypatch.setattr(_blas, "_set_here", False)
    assert _blas.user_env() is None  # nothing changed yet: the environment is theirs
    _blas.one_thread()
    assert os.environ[_blas.VAR] == "1"
    env = _blas.user_env()
    assert env is not None and _blas.VAR not in env and env["PATH"] == os.environ["PATH"]
    monkeypatch.delenv(_blas.VAR)


def test_the_collector_is_paused_while_modules_load_and_back_for_the_analysis() -> None:
    # traceoverlap.core._collector: off from the start of the command until the analysis begins
    # (then on, with what the imports built frozen); a library caller is never touched.
    code = (
        "import gc, os, sys\n"
        "import traceoverlap.run.analysis as a\n"
        "from traceoverlap.__main__ import run\n"
        "seen = []\n"
        "real = a.analyze\n"
        "a.analyze = lambda *x, **k: (seen.append(gc.isenabled()), real(*x, **k))[1]\n"
        "import traceoverlap.cli as c\n"
        "import atexit\n"
        "atexit.register(lambda: print('before', seen, 'after', gc.isenabled(),"
        " gc.get_freeze_count() > 0))\n"
        "sys.argv = ['traceoverlap', 'analyze', sys.argv[1], '--format', 'json', '-o', "
        "os.devnull]\n"
        "run()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(FIXTURE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "before [False] after True True"


def test_the_collector_is_left_alone_for_a_library_caller() -> None:
    import gc

    from traceoverlap.core import _collector

    before = (gc.isenabled(), gc.get_freeze_count())
    _collector.resume()  # nothing paused it: no freeze, nothing changed
    assert (gc.isenabled(), gc.get_freeze_count()) == before and not _collector._paused


def test_an_in_process_run_gives_the_collector_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # a command that ends before any analysis (here --version) leaves the collector as it was
    import gc

    from traceoverlap import __main__ as entry

    monkeypatch.setattr(sys, "argv", ["traceoverlap", "--version"])
    # not the real exit: no exit handlers run in the test process (they would tear down what
    # other tests' modules registered, torch's operator libraries among them), and no os._exit
    monkeypatch.setattr(entry.atexit, "_run_exitfuncs", lambda: None)
    monkeypatch.setattr(entry.os, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    assert gc.isenabled()
    try:
        with pytest.raises(SystemExit):
            entry.run()
        assert gc.isenabled()
    finally:
        gc.unfreeze()  # what run() froze goes back to the collector of the test process
