"""Start the ranks: under torchrun (env vars) or spawned here as child processes.

Spawned ranks are plain subprocesses (``python -m traceoverlap_workloads ...`` with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT set) so the parent can watch them: when one exits non-zero the others are
killed at once and the parent says which rank failed, instead of the survivors hanging in a collective
until the process-group timeout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from typing import IO

# Kineto prints these on every profiler start/stop (not switchable by KINETO_LOG_LEVEL); they
# bury the lines a user needs, so spawned ranks' stderr is forwarded without them.
NOISE_PREFIXES = (b"USDT:",)


def free_port() -> int:
    """A TCP port that was free a moment ago (the rendezvous binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    argv: list[str],
    world_size: int,
    timeout_s: float,
    module: str = "traceoverlap_workloads",
    keep_going: bool = False,
) -> int:
    """Run ``world_size`` copies of ``python -m module argv``; return 0 or the failing exit code.

    ``timeout_s`` bounds the whole run (on top of the process group's own collective timeout), so a
    wedged rank cannot keep the parent waiting forever. ``keep_going``: a rank that fails does not
    stop the others (the planted hangs, where every surviving rank must still write its dump); the
    first failure's exit code is returned once all have exited.
    """
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    forwarders: list[threading.Thread] = []
    for rank in range(world_size):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            TRACEOVERLAP_SPAWNED="1",
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *argv], env=env, stderr=subprocess.PIPE
        )
        assert proc.stderr is not None
        forwarders.append(threading.Thread(target=_forward, args=(proc.stderr,), daemon=True))
        forwarders[-1].start()
        procs.append(proc)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed and keep_going and None not in codes:
                for t in forwarders:
                    t.join(timeout=5)
                for rank, code in failed:
                    print(
                        f"traceoverlap-workloads: rank {rank} failed (exit {code})", file=sys.stderr
                    )
                return failed[0][1] or 1
            if failed and not keep_going:
                rank, code = failed[0]
                _kill(procs)
                for t in forwarders:
                    t.join(timeout=5)
                print(
                    f"traceoverlap-workloads: rank {rank} failed (exit {code}); stopped the other "
                    "ranks (its error is above)",
                    file=sys.stderr,
                )
                return code or 1
            if all(c == 0 for c in codes):
                for t in forwarders:
                    t.join(timeout=5)
                return 0
            if time.monotonic() > deadline:
                _kill(procs)
                print(
                    f"traceoverlap-workloads: the run took longer than {timeout_s:g} s; stopped all "
                    "ranks (raise --timeout for large presets)",
                    file=sys.stderr,
                )
                return 124
            time.sleep(0.05)
    except KeyboardInterrupt:
        _kill(procs)
        raise


def _forward(stream: IO[bytes]) -> None:
    for line in iter(stream.readline, b""):
        # Kineto sometimes writes two records without a newline between them.
        for part in line.replace(b"USDT:", b"\nUSDT:").splitlines(keepends=True):
            if part.strip() and not part.startswith(NOISE_PREFIXES):
                sys.stderr.buffer.write(part if part.endswith(b"\n") else part + b"\n")
                sys.stderr.buffer.flush()


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
