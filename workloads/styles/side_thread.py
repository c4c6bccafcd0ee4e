"""A collective on a side thread: the training loop averages its gradients with one blocking
all-reduce after backward (group WORLD); meanwhile a metrics thread, started before the loop,
all-reduces a small counter tensor every 2 ms on its own process group (``metrics_pg``), so its
all-reduces land inside forward and backward. Cause by construction: the side thread's
all-reduces are no gradient sync (diagnosis.md §13): their purpose is unknown, never "use DDP".

    OMP_NUM_THREADS=1 python workloads/styles/side_thread.py OUT [WORLD]
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

ROUNDS = 60  # metrics all-reduces per rank; the same count on every rank (they must match)


def metrics_loop(group, stop):
    counter = torch.zeros(4)
    for _ in range(ROUNDS):
        with record_function("metrics_sync"):
            counter += 1
            dist.all_reduce(counter, group=group)
        time.sleep(0.002)
    stop.set()


def proc(rank, world, out, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    metrics_pg = dist.new_group(list(range(world)))
    torch.manual_seed(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(192, 192) for _ in range(3)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(48, 192)
    done = threading.Event()
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
        experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True),
    ) as prof:
        side = threading.Thread(target=metrics_loop, args=(metrics_pg, done), daemon=True)
        side.start()
        for _ in range(5):
            with record_function("forward"):
                loss = model(x).pow(2).mean()
            with record_function("backward"):
                loss.backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
            dist.all_reduce(grads)
            opt.step()
            opt.zero_grad()
            prof.step()
        side.join()
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json.gz"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, ".store"))
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(proc, args=(world, out, store), nprocs=world)
    if os.path.exists(store):
        os.remove(store)
