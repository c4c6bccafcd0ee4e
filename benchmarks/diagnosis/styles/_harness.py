"""What every style script shares, and nothing more: the flags that plant a cause, the process
group, the profiler and the output file. The training loops themselves (the part a diagnosis rule
could overfit) live in the style scripts, each written its own way.

A style script is run once per rank with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set
(benchmarks/diagnosis/record.py does it) and writes ``<out>/rank{r}.json.gz``.

Planted causes (all off by default: a healthy run):
- ``--slow-rank R --slow-range NAME --slow-ms MS``: rank R spends MS more milliseconds inside the
  range NAME every profiled step, sleeping (``--slow-kind sleep``, the host idles) or computing
  (``--slow-kind compute``, a busy matmul loop of about that length).
- ``--moving``: the slow rank moves: step i is slowed on rank (R + i) % world.
- ``--uneven-rank R --uneven-factor F``: rank R's batch is F times the others'.
- ``--contention-rank R``: rank R is pinned to CPU 0 together with ``--contention-procs`` busy
  processes (another job competing for its core).
- ``--poll-ms MS``: ranks wait for their asynchronous work by polling it with a sleep of MS
  between looks (a late wake-up after the communication ended), instead of ``wait()``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=4, help="profiled steps")
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--slow-range", default="dataloader")
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--slow-kind", choices=("sleep", "compute"), default="sleep")
    p.add_argument("--moving", action="store_true")
    p.add_argument("--uneven-rank", type=int, default=None)
    p.add_argument("--uneven-factor", type=float, default=1.0)
    p.add_argument("--contention-rank", type=int, default=None)
    p.add_argument("--contention-procs", type=int, default=2)
    p.add_argument("--poll-ms", type=float, default=0.0)
    return p


class Run:
    """The rank's process group, profiler and planted causes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        torch.manual_seed(args.seed * 1000 + self.rank)
        self.step = 0
        self._busy: list[subprocess.Popen[bytes]] = []
        self._burn_w = torch.randn(160, 160) * 0.05
        if args.contention_rank == self.rank:
            self._contend()

    # --- planted causes -------------------------------------------------------------------------
    def slow_rank(self) -> int | None:
        a = self.args
        if a.slow_rank is None or a.slow_ms <= 0:
            return None
        return (a.slow_rank + self.step) % self.world if a.moving else a.slow_rank

    def batch(self, base: int) -> int:
        a = self.args
        return int(base * a.uneven_factor) if a.uneven_rank == self.rank else base

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        """``record_function(name)``, slowed on the slow rank when ``name`` is the planted range."""
        with record_function(name):
            if name == self.args.slow_range and self.slow_rank() == self.rank:
                self._plant(self.args.slow_ms / 1e3)
            yield

    def plant_here(self, name: str) -> None:
        """The planted delay without opening a range (the caller already has one open)."""
        if name == self.args.slow_range and self.slow_rank() == self.rank:
            self._plant(self.args.slow_ms / 1e3)

    def _plant(self, seconds: float) -> None:
        if self.args.slow_kind == "sleep":
            time.sleep(seconds)
            return
        end = time.perf_counter() + seconds
        x = self._burn_w
        while time.perf_counter() < end:
            x = torch.tanh(x @ self._burn_w)

    def wait(self, work: Any) -> None:
        """Wait for an async work handle: ``wait()``, or a sleepy poll under ``--poll-ms``."""
        if self.args.poll_ms > 0:
            while not work.is_completed():
                time.sleep(self.args.poll_ms / 1e3)
        work.wait()

    def _contend(self) -> None:
        code = "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass\n"
        for _ in range(self.args.contention_procs):
            self._busy.append(subprocess.Popen([sys.executable, "-c", code]))
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setaffinity(0, {0})

    # --- the loop -------------------------------------------------------------------------------
    def loop(
        self, body: Callable[[int], None], warmup: int = 2, finish: Callable[[], None] | None = None
    ) -> None:
        """Run ``warmup`` unprofiled steps then ``--steps`` profiled ones, one ProfilerStep each;
        then ``finish`` (join side threads) before the process group goes."""
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"rank{self.rank}.json.gz"
        sched = schedule(wait=1, warmup=warmup - 1, active=self.args.steps, repeat=1)
        try:
            with profile(
                activities=[ProfilerActivity.CPU],
                schedule=sched,
                on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
                record_shapes=True,
            ) as prof:
                for i in range(warmup + self.args.steps):
                    self.step = i
                    body(i)
                    prof.step()
            if finish is not None:
                finish()
            dist.barrier()
        finally:
            for p in self._busy:
                p.kill()
                p.wait()
            dist.destroy_process_group()
