"""A loop that skips bad batches: every 7th batch raises inside the forward (a malformed sample)
and the loop catches the error, keeps it in `last_error` for a report, and goes on. The
traceback the error holds keeps that step's frame (and its batch) alive until the next error
replaces it: one batch at a time, not a leak.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory"],
    "no_words": ["after the last mark"],
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10))

    def forward(self, x):
        if not torch.isfinite(x).all():
            raise ValueError("malformed batch")
        return self.body(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=84)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    last_error, skipped = None, 0
    for step in range(a.steps):
        x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
        if step % 7 == 6:
            x[0, 0] = float("nan")
        try:
            loss = F.cross_entropy(model(x), y)
        except ValueError as e:
            last_error, skipped = e, skipped + 1
            continue
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _truth.write(steps=a.steps - skipped, skipped=skipped)
    print("skipped %d (%s)" % (skipped, last_error))


if __name__ == "__main__":
    main()
