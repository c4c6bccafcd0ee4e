"""DDP with gradient accumulation: ``--accum`` micro-batches per step, the first ones under
``model.no_sync()`` (no communication), the last one syncing. Ranges: fetch_batch, micro_fwd_bwd,
sync_micro, opt_step. The whole step's gradient sync lands on the last micro-batch."""

import contextlib

import torch
from _harness import Run, parser
from torch.nn.parallel import DistributedDataParallel

p = parser(__doc__)
p.add_argument("--accum", type=int, default=3)
args = p.parse_args()
run = Run(args)
net = torch.nn.Sequential(
    torch.nn.Linear(128, 512),
    torch.nn.Tanh(),
    torch.nn.Linear(512, 512),
    torch.nn.Tanh(),
    torch.nn.Linear(512, 128),
)
ddp = DistributedDataParallel(net, bucket_cap_mb=0.5)
sgd = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)


def step(i: int) -> None:
    for k in range(args.accum):
        last = k == args.accum - 1
        with run.range("fetch_batch"):
            xb = torch.randn(run.batch(32), 128)
        ctx = contextlib.nullcontext() if last else ddp.no_sync()
        with ctx, run.range("sync_micro" if last else "micro_fwd_bwd"):
            out = ddp(xb)
            (out.pow(2).mean() / args.accum).backward()
    with run.range("opt_step"):
        sgd.step()
        sgd.zero_grad()


run.loop(step)
