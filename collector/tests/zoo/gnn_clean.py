"""A clean graph network: two message-passing layers written with `index_add_` (the way
PyG's scatter works) over a random graph of 20 000 nodes, full-batch node classification with a
validation every 20 steps under `no_grad`, its accuracy kept as a float. Nothing grows.

EXPECT = {
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 3,
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Conv(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)

    def forward(self, x, src, dst):
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, dst, h[src])
        deg = torch.zeros(x.shape[0]).index_add_(0, dst, torch.ones(dst.shape[0])).clamp(min=1)
        return out / deg[:, None]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = Conv(64, 128), Conv(128, 8)

    def forward(self, x, src, dst):
        return self.c2(F.relu(self.c1(x, src, dst)), src, dst)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n, e = 20_000, 100_000
    x, y = torch.randn(n, 64), torch.randint(0, 8, (n,))
    src, dst = torch.randint(0, n, (e,)), torch.randint(0, n, (e,))
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    accuracy = []
    evals = 0
    for step in range(1, a.steps + 1):
        model.train()
        loss = F.cross_entropy(model(x, src, dst), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 20 == 0:
            model.eval()
            with torch.no_grad():
                accuracy.append((model(x, src, dst).argmax(1) == y).float().mean().item())
            evals += 1
    _truth.write(steps=a.steps, evals=evals)
    print("accuracy %.3f" % accuracy[-1])


if __name__ == "__main__":
    main()
