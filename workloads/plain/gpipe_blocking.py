"""A 2-stage GPipe pipeline with blocking ``dist.send`` / ``dist.recv`` (gloo, CPU), written as a
plain procedural script: one function per rank, ``torch.multiprocessing.spawn``, the profiler's
own ``ProfilerStep#N`` as the only marker.

Stage 0 runs the first two layers of an MLP on 4 micro-batches, sending each activation to
stage 1; stage 1 (the last stage: three times the layers, and the loss) receives, finishes the
forward; then the backward runs in reverse, stage 1 sending each input gradient back. Stage 1
sits in ``recv`` while stage 0 computes its first activation, and stage 0 sits in ``recv`` for
the gradients while stage 1 runs its longer forward and backward: pipeline bubbles, waits for
the other stage, which gloo records no worker event for (the wait happens inside
``c10d::recv_`` or under the ``gloo:recv`` record torch makes on the calling thread).

    OMP_NUM_THREADS=1 python workloads/plain/gpipe_blocking.py --out runs/gpipe
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

WIDTH, MICRO, BATCH = 256, 4, 128


def stage(rank: int) -> nn.Module:
    torch.manual_seed(rank)
    layers = []
    for _ in range(2 if rank == 0 else 6):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers)


def train_step(rank: int, model: nn.Module, opt: torch.optim.Optimizer, data: list) -> None:
    acts_in, acts_out = [], []
    for k in range(MICRO):  # forward of every micro-batch
        if rank == 0:
            x = data[k]
            y = model(x)
            dist.send(y.detach(), dst=1)
        else:
            x = torch.empty(BATCH, WIDTH)
            dist.recv(x, src=0)
            x.requires_grad_(True)
            y = model(x).pow(2).mean()
        acts_in.append(x)
        acts_out.append(y)
    for k in reversed(range(MICRO)):  # backward, last micro-batch first
        if rank == 1:
            acts_out[k].backward()
            dist.send(acts_in[k].grad, dst=0)
        else:
            g = torch.empty(BATCH, WIDTH)
            dist.recv(g, src=1)
            acts_out[k].backward(g)
    opt.step()
    opt.zero_grad()


def run(rank: int, world: int, port: int, out: str, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = stage(rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [torch.randn(BATCH, WIDTH) for _ in range(MICRO)]
    sched = torch.profiler.schedule(wait=1, warmup=1, active=steps)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(out, f"rank{rank}.json")),
    ) as prof:
        for _ in range(steps + 2):
            train_step(rank, model, opt, data)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(2, port, args.out, args.steps), nprocs=2, join=True)
