"""DistributedDataParallel, the textbook loop: a conv + MLP model wrapped in DDP (its reducer
buckets and overlaps the gradient all-reduce with backward); a data loader, and a checkpoint
every step. ``--bucket-mb`` sets DDP's bucket cap."""

import io

import torch
from _harness import Run, parser
from torch.nn.parallel import DistributedDataParallel as DDP

p = parser(__doc__)
p.add_argument("--bucket-mb", type=float, default=1.0)
p.add_argument("--width", type=int, default=384)
args = p.parse_args()
run = Run(args)


class Net(torch.nn.Module):
    def __init__(self, w: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 16, 5, padding=2)
        self.body = torch.nn.Sequential(
            torch.nn.Linear(16 * 32, w),
            torch.nn.GELU(),
            torch.nn.Linear(w, w),
            torch.nn.GELU(),
            torch.nn.Linear(w, w),
            torch.nn.GELU(),
            torch.nn.Linear(w, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(torch.relu(self.conv(x)).flatten(1))


model = DDP(Net(args.width), bucket_cap_mb=args.bucket_mb)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()


def load(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    with run.range("dataloader"):
        return torch.randn(n, 8, 32), torch.randint(0, 10, (n,))


def step(i: int) -> None:
    x, y = load(run.batch(48))
    with run.range("forward"):
        loss = loss_fn(model(x), y)
    with run.range("backward"):
        loss.backward()
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)
    with run.range("save_checkpoint"):
        if run.rank == 0 or args.slow_range == "save_checkpoint":
            torch.save(model.module.state_dict(), io.BytesIO())


run.loop(step)
