"""Pipeline parallelism, one stage per rank, written like a hand-rolled Megatron schedule:
``--schedule gpipe`` (all forwards, then all backwards) or ``1f1b`` (warm-up forwards, one
forward one backward, cool-down backwards); ``--p2p blocking`` (``dist.send`` / ``dist.recv``,
the two sides of an exchange ordered by stage parity), ``isend`` (``isend`` / ``irecv`` then wait)
or ``batch`` (``batch_isend_irecv``). ``--micro`` micro-batches per step. Ranges: dataloader
(first stage), stage_forward, stage_backward, optimizer."""

import torch
import torch.distributed as dist
from _harness import Run, parser

p = parser(__doc__)
p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe")
p.add_argument("--p2p", choices=("blocking", "isend", "batch"), default="blocking")
p.add_argument("--micro", type=int, default=4)
p.add_argument("--hidden", type=int, default=256)
args = p.parse_args()
run = Run(args)
S, s, M, H = run.world, run.rank, args.micro, args.hidden
first, last = s == 0, s == S - 1
stage = torch.nn.Sequential(
    *[torch.nn.Sequential(torch.nn.Linear(H, H), torch.nn.Tanh()) for _ in range(3)]
)
opt = torch.optim.SGD(stage.parameters(), lr=0.01)
MB = 32


def exchange(sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> None:
    if not sends and not recvs:
        return
    if args.p2p == "blocking":
        ops = [("s", t, q) for t, q in sends] + [("r", t, q) for t, q in recvs]
        if s % 2 == 1:
            ops.reverse()
        for kind, t, q in ops:
            (dist.send if kind == "s" else dist.recv)(t, q)
    elif args.p2p == "isend":
        works = [dist.isend(t, q) for t, q in sends] + [dist.irecv(t, q) for t, q in recvs]
        for w in works:
            run.wait(w)
    else:
        ops = [dist.P2POp(dist.isend, t, q) for t, q in sends]
        ops += [dist.P2POp(dist.irecv, t, q) for t, q in recvs]
        for w in dist.batch_isend_irecv(ops):
            run.wait(w)


def buf() -> torch.Tensor:
    return torch.empty(run.batch(MB), H)


class Step:
    def __init__(self) -> None:
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.data: list[torch.Tensor] = []

    def recv_fwd(self) -> torch.Tensor:
        if first:
            return self.data.pop(0)
        x = buf()
        exchange([], [(x, s - 1)])
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with run.range("stage_forward"):
            x = x.requires_grad_(not first)
            y = stage(x)
            if last:
                y = y.pow(2).mean()
            self.saved.append((x, y))
            return y

    def backward(self, g: torch.Tensor | None) -> torch.Tensor | None:
        x, y = self.saved.pop(0)
        with run.range("stage_backward"):
            if g is None:
                y.backward()
            else:
                y.backward(g)
        return None if first else x.grad

    def send_fwd(self, y: torch.Tensor, recv_bwd: bool) -> torch.Tensor | None:
        g = buf() if (recv_bwd and not last) else None
        sends = [] if last else [(y.detach(), s + 1)]
        exchange(sends, [] if g is None else [(g, s + 1)])
        return g

    def send_bwd(self, gx: torch.Tensor | None, recv_fwd: bool) -> torch.Tensor | None:
        x = buf() if (recv_fwd and not first) else None
        sends = [] if first else [(gx, s - 1)]
        exchange(sends, [] if x is None else [(x, s - 1)])
        if recv_fwd and first:
            return self.data.pop(0)
        return x

    def recv_bwd(self) -> torch.Tensor | None:
        if last:
            return None
        g = buf()
        exchange([], [(g, s + 1)])
        return g


def step(i: int) -> None:
    st = Step()
    with run.range("dataloader"):
        if first:
            st.data = [torch.randn(run.batch(MB), H) for _ in range(M)]
    if args.schedule == "gpipe":
        for _ in range(M):
            st.send_fwd(st.forward(st.recv_fwd()), recv_bwd=False)
        for _ in range(M):
            st.send_bwd(st.backward(st.recv_bwd()), recv_fwd=False)
    else:
        warm = min(S - s - 1, M)
        for _ in range(warm):
            st.send_fwd(st.forward(st.recv_fwd()), recv_bwd=False)
        rest = M - warm
        x = st.recv_fwd() if rest > 0 else None
        for j in range(rest):
            g = st.send_fwd(st.forward(x), recv_bwd=True)
            gx = st.backward(g)
            x = st.send_bwd(gx, recv_fwd=j < rest - 1)
        for _ in range(warm):
            st.send_bwd(st.backward(st.recv_bwd()), recv_fwd=False)
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad()


run.loop(step)
