"""Hand-rolled bucketing: after backward, gradients are packed into flat buckets of about
``--bucket-kb`` KiB, each bucket all-reduced asynchronously, then unpacked. No overlap with
backward: the buckets only overlap one another and the unpacking. Ranges: data, fwd, bwd,
pack_and_reduce, apply."""

import torch
import torch.distributed as dist
from _harness import Run, parser

p = parser(__doc__)
p.add_argument("--bucket-kb", type=int, default=256)
args = p.parse_args()
run = Run(args)
torch.manual_seed(1234)  # same init on every rank, no broadcast
blocks = torch.nn.ModuleList([torch.nn.Linear(192, 192) for _ in range(8)])
params = list(blocks.parameters())


def model(x: torch.Tensor) -> torch.Tensor:
    for b in blocks:
        x = torch.nn.functional.silu(b(x)) + x
    return x


def buckets() -> list[list[torch.Tensor]]:
    out, cur, size = [], [], 0
    for prm in reversed(params):
        cur.append(prm)
        size += prm.numel() * 4
        if size >= args.bucket_kb * 1024:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


BUCKETS = buckets()


def step(i: int) -> None:
    with run.range("data"):
        x = torch.randn(run.batch(96), 192)
    with run.range("fwd"):
        loss = model(x).square().mean()
    with run.range("bwd"):
        loss.backward()
    with run.range("pack_and_reduce"):
        flats, works = [], []
        for b in BUCKETS:
            flat = torch.cat([q.grad.reshape(-1) for q in b])
            flats.append(flat)
            works.append(dist.all_reduce(flat, async_op=True))
        for b, flat, w in zip(BUCKETS, flats, works):
            run.wait(w)
            off = 0
            for q in b:
                q.grad.copy_(flat[off : off + q.numel()].view_as(q)).div_(run.world)
                off += q.numel()
    with run.range("apply"):
        with torch.no_grad():
            for q in params:
                q.add_(q.grad, alpha=-0.01)
                q.grad = None


run.loop(step)
