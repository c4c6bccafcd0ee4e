"""Plain blocking ``dist.all_reduce(p.grad)`` after backward (gloo, CPU), written as a small
trainer class driven by a ``with`` block, the steps marked by ``record_function("train_step")``
as well as the profiler's ``ProfilerStep#N``.

After each backward the main thread all-reduces every gradient in turn and blocks in each
(``dist.all_reduce`` waits for its work): the optimizer depends on them, so their exposed time is
``dependency`` (blocked), never ``host``, however late the OS wakes the thread up after each.

    OMP_NUM_THREADS=1 python workloads/plain/allreduce_blocking.py --out runs/ar
"""

import argparse
import os
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule


@dataclass
class Trainer:
    rank: int
    world: int
    width: int = 1024
    model: nn.Module = field(init=False)

    def __post_init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Linear(self.width, self.width), nn.Tanh(), nn.Linear(self.width, 16)
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def step(self) -> None:
        with record_function("train_step"):
            x = torch.randn(32, self.width)
            loss = self.model(x).square().mean()
            loss.backward()
            for p in self.model.parameters():
                dist.all_reduce(p.grad)  # blocking: returns when the sum is here
                p.grad /= self.world
            self.opt.step()
            self.opt.zero_grad()


def worker(rank: int, world: int, port: int, out: str, steps: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    trainer = Trainer(rank, world)
    path = os.path.join(out, f"rank{rank}.json")
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=steps),
        on_trace_ready=lambda p: p.export_chrome_trace(path),
    ) as prof:
        for _ in range(steps + 2):
            trainer.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port, args.out, args.steps), nprocs=2, join=True)


if __name__ == "__main__":
    main()
