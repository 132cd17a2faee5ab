"""Forked DataLoader workers over a JSON-lines style dataset: a list of 400 000 dict records
(`{"id", "label", "tokens"}`), read in shuffled order by 2 forked workers started anew each
epoch (no `persistent_workers`). Three epochs: a pair lives ~7 s, and the collector reads a tree
of this size about once a second at most, so a pair is read 4 times (the fewest a worker's growth
is judged on) in a quiet run; under the test suite's load two epochs once gave no pair judged
growing. Each read of a record writes the reference counts of its dict
and list: each worker copies its parent's pages as it reads, and a new pair of workers copies
them again in the next epoch. Nothing in the program leaks. A third shape for the workers'
threshold, checked here and set on neither this program nor the two it was set on
(`cow_dataloader.py`, `cow_text_corpus.py`).

EXPECT = {
    "findings": ["worker-private-growth"],
    "absent": ["leak", "eval-peak", "eval-retains-memory"],
    "words": ["their parent's memory"],
    "no_words": ["spawn", "grow their own memory"],
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Records(torch.utils.data.Dataset):
    def __init__(self, n):
        self.records = [{"id": "rec-%d" % i, "label": i % 4,
                         "tokens": [(i * 17 + j * 5) % 5000 + 300 for j in range(20)]}
                        for i in range(n)]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        r = self.records[i]
        return torch.tensor(r["tokens"][:16]), r["label"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = Records(a.records)
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True, num_workers=2,
                                         multiprocessing_context="fork")
    model = nn.Sequential(nn.EmbeddingBag(5300, 32), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    steps = 0
    for _ in range(a.epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
    _truth.write(steps=steps, workers=2)
    print("steps %d loss %.4f" % (steps, loss.item()))


if __name__ == "__main__":
    main()
