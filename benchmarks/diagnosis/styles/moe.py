"""Expert parallelism: one expert per rank, tokens routed by a top-1 router, sent to their expert
with ``all_to_all_single`` (dispatch) and back (combine), through
``torch.distributed.nn.functional`` so that backward runs the reverse all-to-alls; the dense
layers' gradients are all-reduced after backward. ``--routing even`` spreads tokens evenly;
``skewed`` sends ``--hot-share`` of every rank's tokens to the expert on rank ``--hot``.
Ranges: dataloader, router, dispatch, expert, combine, backward, dense_grad_sync, optimizer."""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn
from _harness import Run, parser

p = parser(__doc__)
p.add_argument("--routing", choices=("even", "skewed"), default="even")
p.add_argument("--hot", type=int, default=0)
p.add_argument("--hot-share", type=float, default=0.7)
p.add_argument("--tokens", type=int, default=256)
p.add_argument("--hidden", type=int, default=128)
args = p.parse_args()
run = Run(args)
W, H = run.world, args.hidden
torch.manual_seed(3)
dense = torch.nn.Linear(H, H)
expert = torch.nn.Sequential(torch.nn.Linear(H, 4 * H), torch.nn.GELU(), torch.nn.Linear(4 * H, H))
opt = torch.optim.SGD(list(dense.parameters()) + list(expert.parameters()), lr=0.01)


def split_counts(t: int) -> list[int]:
    if args.routing == "even":
        base = [t // W] * W
    else:
        hot = int(t * args.hot_share)
        rest = (t - hot) // (W - 1)
        base = [hot if e == args.hot else rest for e in range(W)]
    base[-1] += t - sum(base)
    return base


def step(i: int) -> None:
    with run.range("dataloader"):
        x = torch.randn(run.batch(args.tokens), H)
    with run.range("router"):
        h = torch.relu(dense(x))
        send = split_counts(h.shape[0])
        counts = torch.tensor(send)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)
        recv = recv_counts.tolist()
    with run.range("dispatch"):
        tokens = dfn.all_to_all_single(torch.empty(sum(recv), H), h, recv, send)
    with run.range("expert"):
        y = expert(tokens)
    with run.range("combine"):
        back = dfn.all_to_all_single(torch.empty(h.shape[0], H), y, send, recv)
    with run.range("backward"):
        (back + h).pow(2).mean().backward()
    with run.range("dense_grad_sync"):
        for q in dense.parameters():
            dist.all_reduce(q.grad)
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad()


run.loop(step)
