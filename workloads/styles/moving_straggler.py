"""A straggler that moves: in step i, rank i % WORLD sleeps 25 ms inside ``load_batch`` before
its forward; gradients are summed by one blocking all-reduce of a flat buffer after backward.
Cause by construction: the late rank changes every step (diagnosis.md §14, "stable").

    OMP_NUM_THREADS=1 python workloads/styles/moving_straggler.py OUT [WORLD]
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

STEPS, SLEEP_S = 6, 0.025


def worker(rank, world, out, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 8)
    sched = schedule(wait=1, warmup=1, active=STEPS - 2)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, record_shapes=True) as prof:
        for i in range(STEPS):
            with record_function("load_batch"):
                if i % world == rank:
                    time.sleep(SLEEP_S)
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            flat = torch.cat([p.grad.flatten() for p in net.parameters()])
            dist.all_reduce(flat)
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json.gz"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1]
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, ".store"))
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(worker, args=(world, out, store), nprocs=world)
    os.remove(store) if os.path.exists(store) else None
