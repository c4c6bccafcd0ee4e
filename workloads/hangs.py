"""Planted hangs that dump PyTorch's Flight Recorder: each cause known by construction.

``python -m traceoverlap_workloads.hangs --case NAME --out DIR`` spawns the ranks (gloo, CPU),
runs a few ordinary collectives, then plants one fault on one rank (``--rank``) at the
``--seq``-th collective of a group. Every rank then dumps its Flight Recorder ring buffer, as
``DIR/fr_<rank>`` (pickle, ``_dump_fr_trace()``, with stacks) and ``DIR/fr_<rank>.json``
(``_dump_fr_trace_json(True, False)``), and exits: when its own collective times out or fails,
or, for a rank that is blocked or sleeping and never fails, when a watchdog thread's deadline
passes (``2 * --timeout + 2`` s after the planted step began; ``sleep``: ``3 * --timeout + 4``).
Every rank exits 0 once it dumped.

Cases (the planted rank is ``k = --rank``, the planted collective is #``n = --seq``):

- ``skip``: rank k never calls all_reduce #n of the world group; it sits in a sleep (a stand-in
  for a data loader that never returns) until its watchdog dumps. Blocking ``dist.all_reduce`` loop.
  ``--rank 2,3``: every rank listed skips it.
- ``crash``: rank k dies (``os._exit(3)``, no dump) before all_reduce #n; the others fail at once
  ("Connection closed by peer") and dump: a set of dumps with one rank missing.
- ``other-op``: rank k calls another collective at sequence id n (``--other barrier``: the
  world group, blocking; ``--other broadcast``: a second group, async ``work.wait()``).
- ``size``: rank k all_reduces ``--numel + 1`` elements at #n where the others reduce ``--numel``.
  gloo does not hang on this: a rank that receives a longer chunk than it expects aborts the
  process (``gloo::EnforceNotMet``, SIGABRT, no dump); the others fail and dump.
- ``dtype``: rank k all_reduces int32 at #n where the others reduce float32 (same bytes).
- ``chain``: group A = ranks 0..world-2, group B = the last two ranks; each step B's members
  all_reduce in B, then A's in A. At step n rank k (the last) never calls B #n: the bridge rank
  (world-2) waits in B #n for k, and A's other ranks wait in A #n for the bridge (a chain
  ending at k, no cycle).
- ``group-order``: two groups, A = every rank, B = the last two ranks. Each step every rank
  all_reduces in A, then B's members in B; at step n rank k (a member of B) enters B first:
  k waits in B for its B peer, which waits in A for k (a cycle across groups).
- ``recv-no-send``: rank k calls ``dist.recv`` from rank ``(k - 1) % world`` instead of
  all_reduce #n; that rank never sends and waits in all_reduce #n for k.
- ``sleep``: rank k sleeps ``--timeout + 1.5`` s before all_reduce #n (async), then calls it:
  late, not missing; the others have timed out by then.
- ``ddp-uneven``: an MLP in ``DistributedDataParallel`` (one 1,089-float bucket a step); rank k
  has one batch fewer: after n-1 steps it calls the end-of-epoch ``dist.barrier()`` while the
  others are in step n's backward, in DDP's bucket all-reduces (the Reducer's own calls, not the
  user's; their sequence ids depend on DDP's construction broadcasts and bucket rebuild).
- ``healthy``: no fault; two groups, collectives both styles, a send/recv pair, a final barrier,
  then every rank dumps.

Examples::

    python -m traceoverlap_workloads.hangs --case skip --out runs/fr-skip
    python -m traceoverlap_workloads.hangs --case skip --world-size 8 --rank 5 --out runs/fr-skip8
    python -m traceoverlap_workloads.hangs --case group-order --world-size 4 --out runs/fr-order

fixtures/flightrec/README.md lists the committed dumps and the answer each one plants.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import threading
import time
from typing import Any

CASES = (
    "skip",
    "crash",
    "other-op",
    "size",
    "dtype",
    "group-order",
    "chain",
    "recv-no-send",
    "sleep",
    "ddp-uneven",
    "healthy",
)

#: The committed fixtures (fixtures/flightrec/<name>/): name -> arguments. ``--fixtures ROOT``
#: regenerates them all; fixtures/flightrec/README.md says what each one plants.
FIXTURES: dict[str, tuple[str, ...]] = {
    name: tuple(args.split())
    for name, args in (
        ("skip", "--case skip"),
        ("skip_8", "--case skip --world-size 8 --rank 5 --seq 12 --buffer 8"),
        ("skip_two", "--case skip --world-size 4 --rank 2,3"),
        ("crash", "--case crash --world-size 4 --rank 1"),
        ("other-op", "--case other-op --other barrier"),
        ("other-op-broadcast", "--case other-op --other broadcast"),
        ("size", "--case size --world-size 4 --rank 3"),
        ("dtype", "--case dtype"),
        ("group-order", "--case group-order --world-size 4 --rank 3"),
        ("chain", "--case chain --world-size 3"),
        ("recv-no-send", "--case recv-no-send --world-size 3 --rank 2"),
        ("sleep", "--case sleep"),
        ("ddp-uneven", "--case ddp-uneven"),
        ("healthy", "--case healthy"),
    )
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m traceoverlap_workloads.hangs",
        description=(
            "Plant a hang in a gloo job and dump every rank's Flight Recorder: OUT/fr_<rank> "
            "(pickle) and OUT/fr_<rank>.json."
        ),
        epilog=__doc__.split("Examples::", 1)[1].split("fixtures/", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--case", choices=CASES)
    p.add_argument(
        "--fixtures",
        metavar="ROOT",
        help="instead of --case/--out: regenerate every committed fixture as ROOT/<name>/ "
        "(fixtures/flightrec)",
    )
    p.add_argument("--world-size", type=int, default=2, help="ranks (2-8; group-order: >= 3)")
    p.add_argument(
        "--rank",
        default=None,
        help="the planted rank (default: the last rank); skip, crash: a comma-separated list",
    )
    p.add_argument(
        "--seq", type=int, default=6, help="the planted collective's sequence id in its group"
    )
    p.add_argument(
        "--other",
        choices=("barrier", "broadcast"),
        default="barrier",
        help="other-op: what the planted rank calls instead of all_reduce",
    )
    p.add_argument("--numel", type=int, default=1000, help="floats per all_reduce")
    p.add_argument(
        "--timeout", type=float, default=3.0, help="process groups' collective timeout (s)"
    )
    p.add_argument(
        "--buffer", type=int, default=64, help="Flight Recorder entries kept (TORCH_FR_BUFFER_SIZE)"
    )
    p.add_argument("--out", help="folder for fr_<rank> and fr_<rank>.json")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.fixtures:
        return make_fixtures(args.fixtures)
    if args.case is None or args.out is None:
        print("traceoverlap-workloads: give --case and --out (or --fixtures ROOT)", file=sys.stderr)
        return 2
    world = args.world_size
    try:
        ks = [world - 1] if args.rank is None else [int(r) for r in str(args.rank).split(",")]
    except ValueError:
        ks = [-1]
    k = ks[0]
    if len(ks) > 1 and args.case not in ("skip", "crash"):
        print("traceoverlap-workloads: only skip and crash plant several ranks", file=sys.stderr)
        return 2
    if not 2 <= world <= 64 or not all(0 <= r < world for r in ks) or args.seq < 2:
        print(
            "traceoverlap-workloads: need 2 <= --world-size, 0 <= --rank < world, --seq >= 2",
            file=sys.stderr,
        )
        return 2
    if args.case == "chain" and (world < 3 or k != world - 1):
        print(
            "traceoverlap-workloads: chain needs --world-size >= 3 and --rank the last rank",
            file=sys.stderr,
        )
        return 2
    if args.case == "group-order" and (world < 3 or k < world - 2):
        print(
            "traceoverlap-workloads: group-order needs --world-size >= 3 and --rank in the "
            "last two ranks (group B)",
            file=sys.stderr,
        )
        return 2
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        # Must be set before torch.distributed creates the first process group.
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.buffer)
        run_rank(args, int(os.environ["RANK"]), world, k, set(ks))
        return 0  # not reached: run_rank leaves with os._exit
    os.makedirs(args.out, exist_ok=True)
    from .launch import spawn

    # Whole-run bound: startup + the planted step + the watchdog, generously.
    return spawn(
        argv,
        world,
        timeout_s=120.0 + 4 * args.timeout,
        module="traceoverlap_workloads.hangs",
        keep_going=True,
    )


def make_fixtures(root: str) -> int:
    """Regenerate every :data:`FIXTURES` case under ``root`` (old dumps there are removed)."""

    for name, case_args in FIXTURES.items():
        out = os.path.join(root, name)
        if os.path.isdir(out):
            for f in os.listdir(out):
                if f.startswith("fr_"):
                    os.remove(os.path.join(out, f))
        print(f"traceoverlap-workloads: {name}: {' '.join(case_args)}", file=sys.stderr)
        code = main([*case_args, "--out", out])
        # size: one rank aborts inside gloo by construction (exit -6); crash: exit 3
        if code != 0 and name not in ("size", "crash"):
            return code
    return 0


class Dumper:
    """Dumps this rank's Flight Recorder once (main thread or watchdog, whichever is first)."""

    def __init__(self, out: str, rank: int) -> None:
        self.out = out
        self.rank = rank
        self.lock = threading.Lock()
        self.done = False

    def dump_and_exit(self, why: str) -> None:
        import torch

        with self.lock:
            if not self.done:
                self.done = True
                c10d: Any = torch._C._distributed_c10d
                pkl = c10d._dump_fr_trace()
                js = c10d._dump_fr_trace_json(True, False)
                _write(os.path.join(self.out, f"fr_{self.rank}"), pkl)
                _write(os.path.join(self.out, f"fr_{self.rank}.json"), js)
                print(f"rank {self.rank}: dumped ({why})", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        # No process-group teardown: a group with a timed-out collective can abort in it.
        os._exit(0)

    def watchdog(self, deadline_s: float) -> None:
        """Start a thread that dumps and exits ``deadline_s`` from now."""

        def run() -> None:
            time.sleep(deadline_s)
            self.dump_and_exit(f"watchdog after {deadline_s:g} s")

        threading.Thread(target=run, name="fr_watchdog", daemon=True).start()


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def run_rank(args: argparse.Namespace, rank: int, world: int, k: int, ks: set[int]) -> None:
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    dumper = Dumper(args.out, rank)
    # Groups are created by every rank, in the same order (new_group is collective).
    group_b: Any = None
    group_a: Any = None
    if args.case in ("group-order", "healthy") or (
        args.case == "other-op" and args.other == "broadcast"
    ):
        group_a = dist.new_group(list(range(world)), timeout=timeout, group_desc="group_a")
        group_b = dist.new_group([world - 2, world - 1], timeout=timeout, group_desc="group_b")
    elif args.case == "chain":
        group_a = dist.new_group(list(range(world - 1)), timeout=timeout, group_desc="group_a")
        group_b = dist.new_group([world - 2, world - 1], timeout=timeout, group_desc="group_b")
    x = torch.ones(args.numel)
    n = args.seq
    case = args.case
    try:
        if case == "skip":
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                    if rank in ks:
                        data_loader_that_never_returns()
                dist.all_reduce(x)
        elif case == "crash":
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                    if rank in ks:
                        print(f"rank {rank}: crashing (planted)", file=sys.stderr, flush=True)
                        os._exit(3)
                dist.all_reduce(x)
        elif case == "other-op":
            if args.other == "barrier":
                for i in range(1, n + 1):
                    if i == n:
                        dumper.watchdog(2 * args.timeout + 2)
                    if rank == k and i == n:
                        dist.barrier()
                    else:
                        dist.all_reduce(x)
            else:
                # On group A (pg "1"), async style.
                for i in range(1, n + 1):
                    if i == n:
                        dumper.watchdog(2 * args.timeout + 2)
                    if rank == k and i == n:
                        work = dist.broadcast(x, src=0, group=group_a, async_op=True)
                    else:
                        work = dist.all_reduce(x, group=group_a, async_op=True)
                    work.wait()
        elif case == "size":
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                t = torch.ones(args.numel + 1) if (rank == k and i == n) else x
                dist.all_reduce(t)
        elif case == "group-order":
            in_b = rank >= world - 2
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                if rank == k and i == n:
                    dist.all_reduce(x, group=group_b)
                    dist.all_reduce(x, group=group_a)
                else:
                    dist.all_reduce(x, group=group_a)
                    if in_b:
                        dist.all_reduce(x, group=group_b)
        elif case == "dtype":
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                t = x.to(torch.int32) if (rank == k and i == n) else x
                dist.all_reduce(t)
        elif case == "chain":
            # group A: ranks 0..world-2; group B: the bridge (world-2) and k (world-1).
            bridge = world - 2
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                    if rank == k:
                        data_loader_that_never_returns()
                if rank in (bridge, k):
                    dist.all_reduce(x, group=group_b)
                if rank != k:
                    dist.all_reduce(x, group=group_a)
        elif case == "recv-no-send":
            peer = (k - 1) % world
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(2 * args.timeout + 2)
                if rank == k and i == n:
                    dist.recv(x, src=peer)
                else:
                    dist.all_reduce(x)
        elif case == "sleep":
            for i in range(1, n + 1):
                if i == n:
                    dumper.watchdog(3 * args.timeout + 4)
                    if rank == k:
                        slow_step(args.timeout + 1.5)
                work = dist.all_reduce(x, async_op=True)
                work.wait()
        elif case == "ddp-uneven":
            ddp_uneven(rank, k, n, dumper, 2 * args.timeout + 2)
        elif case == "healthy":
            healthy(rank, world, x, n, group_a, group_b)
            dist.barrier()
            dumper.dump_and_exit("healthy, after the final barrier")
        else:  # pragma: no cover - argparse choices
            raise AssertionError(case)
    except Exception as e:  # the planted collective timed out or failed
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        dumper.dump_and_exit(f"{type(e).__name__}: {first}")
    # The planted collective returned on this rank (gloo matched it anyway): still dump.
    dumper.dump_and_exit("the planted step returned without error")


def data_loader_that_never_returns() -> None:
    """The planted rank of ``skip``: never reaches the collective (its watchdog dumps)."""
    while True:
        time.sleep(0.5)


def slow_step(seconds: float) -> None:
    """The planted rank of ``sleep``: late by more than the timeout, then it calls."""
    time.sleep(seconds)


def healthy(rank: int, world: int, x: Any, n: int, group_a: Any, group_b: Any) -> None:
    import torch
    import torch.distributed as dist

    for _ in range(n):
        dist.all_reduce(x)
        work = dist.all_reduce(x, group=group_a, async_op=True)
        work.wait()
        if rank >= world - 2:
            dist.all_reduce(x, group=group_b)
    # one send/recv pair between rank 0 and rank 1 on the world group
    y = torch.zeros(8)
    if rank == 0:
        dist.send(y + 1, dst=1)
    elif rank == 1:
        dist.recv(y, src=0)


def ddp_uneven(rank: int, k: int, n: int, dumper: Dumper, deadline_s: float) -> None:
    """Uneven data under DDP: rank k stops one step early and enters the epoch-end barrier."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = DistributedDataParallel(net, bucket_cap_mb=0.001)  # yet one bucket a step (the dumps)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = n - 1 if rank == k else n
    for step in range(1, steps + 1):
        if step == n:
            dumper.watchdog(deadline_s)
        batch = torch.randn(8, 32)
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == k:
        dumper.watchdog(deadline_s)
    dist.barrier()  # the epoch-end barrier


if __name__ == "__main__":
    sys.exit(main())
