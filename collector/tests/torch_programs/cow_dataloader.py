"""DataLoader workers over a dataset of Python lists (knows nothing about oomscope): each
worker's reads write the rows' reference counts, so it copies its parent's pages one by one —
the copy-on-write "DataLoader leak". With --numpy the rows are one numpy array (no growth)."""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Rows(torch.utils.data.Dataset):
    def __init__(self, n, dim, as_numpy):
        if as_numpy:
            self.rows = np.random.default_rng(0).standard_normal((n, dim), dtype=np.float32)
        else:
            self.rows = [[float(i % 97) / 97.0 + j for j in range(dim)] for i in range(n)]
        self.labels = [i % 10 for i in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return torch.tensor(self.rows[i], dtype=torch.float32), self.labels[i]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--numpy", action="store_true")
    p.add_argument("--step-ms", type=float, default=0.0, help="compute a real model would take")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = Rows(a.rows, a.dim, a.numpy)
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True,
                                         num_workers=a.workers, persistent_workers=True)
    model = nn.Sequential(nn.Linear(a.dim, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    step = 0
    start = time.time()
    while step < a.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if a.step_ms:
                time.sleep(a.step_ms / 1000)
            step += 1
            if step == a.steps:
                break
    print("steps %d loss %.4f in %.1f s" % (step, loss.item(), time.time() - start))


if __name__ == "__main__":
    main()
