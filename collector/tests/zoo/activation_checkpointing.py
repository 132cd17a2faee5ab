"""Activation checkpointing: a deep MLP whose blocks run under `torch.utils.checkpoint`
(non-reentrant), recomputed in the backward. Clean: no leak, nothing kept.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 0,
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import _truth


class Deep(nn.Module):
    def __init__(self, width=512, depth=8):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU())
                                    for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Deep()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    for step in range(a.steps):
        x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _truth.write(steps=a.steps)
    print("loss %.4f" % loss.item())


if __name__ == "__main__":
    main()
