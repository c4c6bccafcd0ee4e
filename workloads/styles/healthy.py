"""A healthy run: every rank does the same work (a 4-layer MLP under DistributedDataParallel,
the same batch size, no sleeps), so the waiting in the gradient all-reduces is only the noise
between ranks. Cause by construction: no straggler (diagnosis.md §14, "significant").

    OMP_NUM_THREADS=1 python workloads/styles/healthy.py OUT [WORLD]
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule


class Trainer:
    def __init__(self, rank, world, store):
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        torch.manual_seed(rank)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(512, 512), torch.nn.GELU()]
        self.model = DDP(torch.nn.Sequential(*layers))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.batch = torch.randn(256, 512)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        self.model(self.batch).square().mean().backward()
        self.opt.step()


def main(rank, world, out, store):
    t = Trainer(rank, world, store)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=4),
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.json.gz"),
    ) as prof:
        for _ in range(6):
            t.step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, ".store"))
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(main, args=(world, out, store), nprocs=world)
    if os.path.exists(store):
        os.remove(store)
