"""Forked DataLoader workers over a text corpus kept as Python objects: a dict of 200 000
documents (each a `str` and a list of token ids), read in shuffled order by 3 forked workers
that stay alive across epochs. Every read takes a reference to a document's objects and so
writes their reference counts: each worker copies its parent's pages one by one (copy-on-write)
until it has touched them all, then levels off. Nothing in the program leaks. The shape differs
from the copy-on-write program the workers' threshold was set on (`cow_dataloader.py`: 2 workers,
rows of floats in a list); here it is checked.

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

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "omicron"]


class Corpus(torch.utils.data.Dataset):
    def __init__(self, n):
        self.docs = {}
        for i in range(n):
            text = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] + str(j) for j in range(12))
            self.docs["doc-%06d" % i] = (text, [1000 + (i * 31 + j) % 30000 for j in range(24)])
        self.keys = list(self.docs)

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        text, ids = self.docs[self.keys[i]]
        return torch.tensor(ids[:16]), len(text) % 4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--docs", type=int, default=200_000)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = Corpus(a.docs)
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True, num_workers=3,
                                         persistent_workers=True,
                                         multiprocessing_context="fork")
    model = nn.Sequential(nn.EmbeddingBag(31000, 32), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    steps, workers_private = 0, 0
    for _ in range(a.epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
        workers_private = max(workers_private, _truth.workers_private_bytes(loader))
    _truth.write(steps=steps, workers=3, workers_private_bytes=workers_private)
    print("steps %d loss %.4f" % (steps, loss.item()))


if __name__ == "__main__":
    main()
