"""A long clean run (nothing to find): the same small MLP as `long_run_inputs.py` for 6 000 steps,
each one marked (`OOMSCOPE_MARK_INTERVAL_MS=0`): more marks a stage than a leak fit reads one by
one (past 4 096 it reads the first and the last of each block of steps). Each step's loss is kept
as a float.

EXPECT = {
    "env": {"OOMSCOPE_MARK_INTERVAL_MS": "0"},
    "thinned": True,
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles",
               "worker-private-growth", "model-copies"],
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6000)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(a.steps):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    _truth.write(steps=a.steps)
    print("mean loss %.4f" % (sum(losses) / len(losses)))


if __name__ == "__main__":
    main()
