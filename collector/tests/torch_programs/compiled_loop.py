"""A `torch.compile`d model trained on batches whose size changes once (the last batch of an
epoch is smaller, say), written as users write it, and the number of graphs Dynamo compiled,
printed at the end: the same with and without the collector, or the hooks changed what the
program compiled (a guard on the global forward hooks, or on a module's own hooks, failing).

Usage: python compiled_loop.py [--steps N] [--form wrap|method|block] [--eval-every N]
(`wrap`: `torch.compile(model)`; `method`: `model.compile()`; `block`: one layer compiled,
`model.inp = torch.compile(model.inp)`, the model around it not.)
"""

import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    """A model of the program's own: its forward is the program's code, which Dynamo compiles."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.out = nn.Linear(64, 32)

    def forward(self, x):
        return self.out(torch.relu(self.inp(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--form", choices=["wrap", "method", "block"], default="wrap")
    p.add_argument("--eval-every", type=int, default=0, help="an eval under no_grad every N steps")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    if a.form == "wrap":
        model = torch.compile(model, backend="eager")
    elif a.form == "method":
        model.compile(backend="eager")
    else:
        model.inp = torch.compile(model.inp, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(a.steps):
        batch = 8 if step < a.steps // 2 else 12  # the shape changes once: one recompile
        x = torch.randn(batch, 32)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if a.eval_every and (step + 1) % a.eval_every == 0:
            model.eval()
            with torch.no_grad():
                model(torch.randn(batch, 32))
            model.train()
    from torch._dynamo.utils import counters

    print("frames compiled:", counters["frames"]["total"])


if __name__ == "__main__":
    main()
