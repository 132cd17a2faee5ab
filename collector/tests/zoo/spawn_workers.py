"""Spawned DataLoader workers that cache decoded items (issue 42, case 4):
`DataLoader(num_workers=3, multiprocessing_context="spawn", persistent_workers=True)` over a
dataset whose `__getitem__` "decodes" an item (5 ms, a 288 KiB tensor) and keeps it in a
per-worker dict. Unshuffled, each worker reads the same third of the items every epoch, so its
memory grows by ~288 MiB through the first epoch and is flat after; nothing is copied from the
parent (a spawned worker is a new interpreter). `--context fork` runs the same loop with forked
workers.

EXPECT = {
    "absent": ["eval-peak", "eval-retains-memory"],
    "words": ["spawn"],
    "no_words": ["copied their parent", "shares its parent's pages"],
}
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Decoded(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n
        self.cache = {}

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        item = self.cache.get(i)
        if item is None:
            g = torch.Generator().manual_seed(i)
            time.sleep(0.005)
            item = self.cache[i] = torch.randn(72 * 1024, generator=g)
        return item[:64], i % 4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--items", type=int, default=3072)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--context", default="spawn")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = Decoded(a.items)
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=False,
                                         num_workers=a.workers, persistent_workers=True,
                                         multiprocessing_context=a.context)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    steps, workers_private = 0, 0
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
        workers_private = max(workers_private, _truth.workers_private_bytes(loader))
    _truth.write(steps=steps, workers=a.workers, context=a.context,
                 cached_bytes_all_workers=a.items * 72 * 1024 * 4,
                 workers_private_bytes=workers_private)
    print("steps %d loss %.4f" % (steps, loss.item()))


if __name__ == "__main__":
    main()
