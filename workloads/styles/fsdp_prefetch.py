"""FSDP-style sharding with prefetch, written by hand (no autograd): each layer's weight is
sharded over the ranks; the forward issues the *next* layer's all-gather (``async_op=True``)
before computing the current layer, and the backward issues the previous layer's all-gather
before computing the current layer's gradients, then reduce-scatters that gradient. Ranges are
named as FSDP2 names them (``FSDP::pre_forward``, ``FSDP::pre_backward``,
``FSDP::post_backward_reduce``). Cause by construction: prefetch is already on (diagnosis.md
§13): the advice never says "enable prefetch".

    OMP_NUM_THREADS=1 python workloads/styles/fsdp_prefetch.py OUT [WORLD]
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

WIDTH, LAYERS, BATCH = 256, 6, 128


def gather(shard, world):
    with record_function("FSDP::all_gather"):
        full = torch.empty(shard.numel() * world)
        work = dist.all_gather_into_tensor(full, shard, async_op=True)
    return full, work


def train_step(shards, x, world, lr=1e-3):
    acts = [x]
    with record_function("## forward ##"):
        nxt = gather(shards[0], world)
        for k in range(LAYERS):
            with record_function("FSDP::pre_forward"):
                full, work = nxt
                work.wait()
                if k + 1 < LAYERS:
                    nxt = gather(shards[k + 1], world)  # prefetch: under this layer's compute
            w = full.view(WIDTH, WIDTH)
            acts.append(torch.relu(acts[-1] @ w.T))
    with record_function("## backward ##"):
        g = 2 * acts[-1] / acts[-1].numel()
        nxt = gather(shards[-1], world)
        for k in reversed(range(LAYERS)):
            with record_function("FSDP::pre_backward"):
                full, work = nxt
                work.wait()
                if k > 0:
                    nxt = gather(shards[k - 1], world)  # prefetch the previous layer
            w = full.view(WIDTH, WIDTH)
            g = g * (acts[k + 1] > 0)
            gw = (g.T @ acts[k]).flatten()
            g = g @ w
            with record_function("FSDP::post_backward_reduce"):
                mine = torch.empty_like(shards[k])
                dist.reduce_scatter_tensor(mine, gw)
            shards[k] -= lr * mine / world


def worker(rank, world, out, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    per = WIDTH * WIDTH // world
    shards = [
        (torch.randn(WIDTH * WIDTH) / WIDTH**0.5)[rank * per : (rank + 1) * per].clone()
        for _ in range(LAYERS)
    ]
    x = torch.randn(BATCH, WIDTH)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.json.gz"),
    ) as prof:
        for _ in range(5):
            train_step(shards, x, world)
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, ".store"))
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(worker, args=(world, out, store), nprocs=world)
    if os.path.exists(store):
        os.remove(store)
