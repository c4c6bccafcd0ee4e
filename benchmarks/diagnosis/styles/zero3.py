"""ZeRO-3 / FSDP written by hand, without FSDP's modules: every layer's weight lives as a flat
shard; forward all-gathers it (``all_gather_into_tensor``) just before the layer runs, or, with
``--prefetch``, launches the next layer's gather before computing the current one; backward's
gradient of each gathered weight is reduce-scattered (``reduce_scatter_tensor``) from a hook; the
optimizer updates the local shard only. Ranges: dataloader, zero3_gather, layer_compute,
backward, zero3_grad_wait, optimizer."""

import torch
import torch.distributed as dist
from _harness import Run, parser

p = parser(__doc__)
p.add_argument("--prefetch", action="store_true")
p.add_argument("--layers", type=int, default=6)
p.add_argument("--hidden", type=int, default=256)
args = p.parse_args()
run = Run(args)
H, L, W = args.hidden, args.layers, run.world
torch.manual_seed(55)
full_init = [torch.randn(H * H) * 0.05 for _ in range(L)]
n = H * H // W
shards = [f[run.rank * n : (run.rank + 1) * n].clone() for f in full_init]
opt = torch.optim.SGD(shards, lr=0.01)
grad_shards = [torch.zeros(n) for _ in range(L)]
pending: list = []


def gather(li: int):
    full = torch.empty(H * H)
    with run.range("zero3_gather"):
        work = dist.all_gather_into_tensor(full, shards[li], async_op=True)
    return full, work


def grad_hook(li: int):
    def hook(t: torch.Tensor) -> None:
        pending.append(
            dist.reduce_scatter_tensor(grad_shards[li], t.grad.reshape(-1), async_op=True)
        )

    return hook


def step(i: int) -> None:
    with run.range("dataloader"):
        x = torch.randn(run.batch(64), H)
    weights = []
    nxt = gather(0) if args.prefetch else None
    for li in range(L):
        if args.prefetch:
            full, work = nxt
            if li + 1 < L:
                nxt = gather(li + 1)
        else:
            full, work = gather(li)
        run.wait(work)
        wt = full.view(H, H).requires_grad_(True)
        wt.register_post_accumulate_grad_hook(grad_hook(li))
        weights.append(wt)
        with run.range("layer_compute"):
            x = torch.tanh(x @ wt)
    with run.range("backward"):
        x.pow(2).mean().backward()
    with run.range("zero3_grad_wait"):
        while pending:
            run.wait(pending.pop(0))
    with run.range("optimizer"):
        for sh, g in zip(shards, grad_shards):
            sh.grad = g / W
        opt.step()


run.loop(step)
