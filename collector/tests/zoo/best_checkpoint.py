"""Keeping the best weights in memory: after each of 4 validations (every 20 steps, under
`no_grad`), a better loss replaces `best_state` with `copy.deepcopy(model.state_dict())`. One
copy at a time, replaced: bounded, not a leak, and evals keep nothing that grows.

EXPECT = {
    "absent": ["leak", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 4,
}
"""

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    val = (torch.randn(512, 1024), torch.randint(0, 10, (512,)))
    best, best_state, evals = float("inf"), None, 0
    for step in range(1, a.steps + 1):
        x, y = torch.randn(64, 1024), torch.randint(0, 10, (64,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 20 == 0:
            model.eval()
            with torch.no_grad():
                v = F.cross_entropy(model(val[0]), val[1]).item()
            model.train()
            evals += 1
            if v < best:
                best, best_state = v, copy.deepcopy(model.state_dict())
    _truth.write(steps=a.steps, evals=evals)
    print("best %.4f kept %d tensors" % (best, len(best_state)))


if __name__ == "__main__":
    main()
