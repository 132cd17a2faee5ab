"""A long run that keeps every batch it trained on: a small MLP for 6 000 steps, each one marked
(`OOMSCOPE_MARK_INTERVAL_MS=0`), that appends each step's inputs to `seen_batches` to inspect the
hardest ones later. More marks a stage than a leak fit reads one by one: past 4 096 it reads the
first and the last of each block of steps (`shared/analysis/src/fit_marks.rs`). 32 KiB a
step, 190 MiB over the run: the leak's rate, of the resident bytes, is checked against the
resident bytes the program gained a step by its own reading (`/proc/self/statm`, from step 100
on).

EXPECT = {
    "env": {"OOMSCOPE_MARK_INTERVAL_MS": "0"},
    "thinned": True,
    "findings": ["leak"],
    "absent": ["eval-peak", "eval-retains-memory", "reference-cycles"],
    "rate_per": "step",
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

seen_batches = []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6000)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    rss_at_100 = None
    for step in range(a.steps):
        if step == 100:
            rss_at_100 = _truth.rss_bytes()
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        seen_batches.append(x)
    _truth.write(steps=a.steps,
                 kept_bytes_per_step=(_truth.rss_bytes() - rss_at_100) / (a.steps - 100))
    print("kept %d batches, last loss %.4f" % (len(seen_batches), loss.item()))


if __name__ == "__main__":
    main()
