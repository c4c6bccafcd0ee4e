"""An optimizer that all-gathers (Distributed-Shampoo-like): gradients are averaged by a blocking
all-reduce after backward; then, inside ``optimizer.step()``, each rank preconditions only its
own block of the flattened parameters (a few matrix products) and the updated blocks are shared
with one ``all_gather_into_tensor``. No FSDP anywhere. Cause by construction: the all-gather is
the optimizer's (diagnosis.md §13), never FSDP.

    OMP_NUM_THREADS=1 python workloads/styles/shampoo_allgather.py OUT [WORLD]
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule


class BlockShampoo(torch.optim.Optimizer):
    """Each rank owns one block of the flat parameter vector; the blocks are all-gathered."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})
        self.world, self.rank = dist.get_world_size(), dist.get_rank()

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        flat = torch.cat([p.flatten() for p in params])
        grad = torch.cat([p.grad.flatten() for p in params])
        n = -(-flat.numel() // self.world)
        pad = n * self.world - flat.numel()
        flat, grad = (
            torch.nn.functional.pad(flat, (0, pad)),
            torch.nn.functional.pad(grad, (0, pad)),
        )
        mine = grad[self.rank * n : (self.rank + 1) * n]
        side = int(n**0.5)
        g = mine[: side * side].view(side, side)
        precond = g @ g.T + 1e-3 * torch.eye(side)
        for _ in range(3):
            precond = 0.5 * (precond + precond.T) @ precond / precond.norm()
        upd = mine.clone()
        upd[: side * side] = (precond @ g).flatten()
        block = flat[self.rank * n : (self.rank + 1) * n] - self.param_groups[0]["lr"] * upd
        out = torch.empty(n * self.world)
        dist.all_gather_into_tensor(out, block.contiguous())
        off = 0
        for p in params:
            p.copy_(out[off : off + p.numel()].view_as(p))
            off += p.numel()


def run(rank, world, out, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 128), torch.nn.Tanh(), torch.nn.Linear(128, 16)
    )
    opt = BlockShampoo(model.parameters())
    data, target = torch.randn(32, 128), torch.randn(32, 16)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
    )
    prof.start()
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(data), target).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        prof.step()
    prof.stop()
    prof.export_chrome_trace(f"{out}/rank{rank}.json.gz")
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, ".store"))
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(run, args=(world, out, store), nprocs=world)
    if os.path.exists(store):
        os.remove(store)
