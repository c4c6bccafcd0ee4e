"""A Shampoo-like distributed optimizer: gradients are all-reduced after backward, then each
rank computes the preconditioned update of the parameters it owns (round-robin ownership;
``precondition``: Kronecker factors and their inverse roots by eigendecomposition) and the
updated parameters are all-gathered so every rank holds them all. Ranges: dataloader, forward,
backward, grad_allreduce, optimizer (precondition, gather_updates)."""

import torch
import torch.distributed as dist
from _harness import Run, parser

p = parser(__doc__)
p.add_argument("--dim", type=int, default=96)
p.add_argument("--layers", type=int, default=4)
args = p.parse_args()
run = Run(args)
D = args.dim
torch.manual_seed(21)
weights = [torch.nn.Parameter(torch.randn(D, D) * 0.05) for _ in range(args.layers)]
while len(weights) % run.world:
    weights.append(torch.nn.Parameter(torch.randn(D, D) * 0.05))
owned = [j for j in range(len(weights)) if j % run.world == run.rank]


def inv_root(m: torch.Tensor) -> torch.Tensor:
    vals, vecs = torch.linalg.eigh(m + 1e-4 * torch.eye(m.shape[0]))
    return vecs @ torch.diag(vals.clamp_min(1e-6).pow(-0.25)) @ vecs.T


def step(i: int) -> None:
    with run.range("dataloader"):
        x = torch.randn(run.batch(64), D)
    with run.range("forward"):
        h = x
        for w in weights:
            h = torch.tanh(h @ w)
        loss = h.pow(2).mean()
    with run.range("backward"):
        loss.backward()
    with run.range("grad_allreduce"):
        for w in weights:
            dist.all_reduce(w.grad)
    with run.range("optimizer"):
        with run.range("precondition"), torch.no_grad():
            for j in owned:
                g = weights[j].grad / run.world
                upd = inv_root(g @ g.T) @ g @ inv_root(g.T @ g)
                weights[j].sub_(0.01 * upd)
        with run.range("gather_updates"), torch.no_grad():
            for base in range(0, len(weights), run.world):
                mine = weights[base + run.rank].data.reshape(-1)
                out = [torch.empty_like(mine) for _ in range(run.world)]
                dist.all_gather(out, mine)
                for r, t in enumerate(out):
                    weights[base + r].data.copy_(t.view(D, D))
        for w in weights:
            w.grad = None


run.loop(step)
