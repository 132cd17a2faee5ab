"""DataLoader workers done right: a dataset whose samples live in one numpy array (no per-sample
Python objects), read by 2 forked workers with `persistent_workers=True` for 3 epochs. The
workers share the array's pages with their parent: nothing is copied, nothing grows.

EXPECT = {
    "absent": ["leak", "worker-private-growth", "reference-cycles", "eval-peak"],
    "no_words": ["after the last mark"],
    "evals": 0,
}
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Arrays(torch.utils.data.Dataset):
    def __init__(self, n):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, 256), dtype=np.float32)
        self.y = rng.integers(0, 10, n)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), int(self.y[i])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(Arrays(40_000), batch_size=512, num_workers=2,
                                         persistent_workers=True,
                                         multiprocessing_context="fork")
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    steps = 0
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
    _truth.write(steps=steps)
    print("steps %d loss %.4f" % (steps, loss.item()))


if __name__ == "__main__":
    main()
