"""Variable-length batches: a GRU classifier over token sequences whose length varies per batch
(8 to 128, padded to the longest in the batch), memory following each batch's length up and
down. Nothing is kept: no leak; the peak comes with the longest batch.

EXPECT = {
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 0,
}
"""

import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(2000, 64)
        self.rnn = nn.GRU(64, 128, batch_first=True)
        self.head = nn.Linear(128, 4)

    def forward(self, ids):
        out, _ = self.rnn(self.emb(ids))
        return self.head(out[:, -1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rnd = random.Random(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    longest = 0
    for step in range(a.steps):
        n = rnd.choice([8, 16, 32, 64, 128])
        longest = max(longest, n)
        ids = torch.randint(1, 2000, (32, n))
        loss = F.cross_entropy(model(ids), torch.randint(0, 4, (32,)))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _truth.write(steps=a.steps, longest=longest)
    print("longest %d loss %.4f" % (longest, loss.item()))


if __name__ == "__main__":
    main()
