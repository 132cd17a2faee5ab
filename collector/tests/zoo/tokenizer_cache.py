"""A tokenizer's cache that never forgets (issue 42, case 3): each step's texts are new, and
`tokenize` memoises every text's ids (Python ints) in the module-level dict `cache`; the model
trains on them as usual. The memory that grows is Python objects, not tensors.

EXPECT = {
    "findings": ["leak"],
    "absent": ["reference-cycles", "eval-peak"],
    "words": ["cache"],
    "no_words": [".item() or .detach()", "autograd graph"],
    "rate_per": "step",
}
"""

import argparse
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

cache = {}


def tokenize(text):
    ids = cache.get(text)
    if ids is None:
        ids = cache[text] = [hash((text, i)) % 1000 + 100_000 for i in range(256)]
    return ids


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=192)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = random.Random(0)
    model = nn.Sequential(nn.EmbeddingBag(1000, 128), nn.ReLU(), nn.Linear(128, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    size = 0
    for step in range(a.steps):
        texts = ["doc-%d-%d" % (step, rng.randrange(10**9)) for _ in range(a.batch)]
        ids = torch.tensor([[i % 1000 for i in tokenize(t)] for t in texts])
        loss = F.cross_entropy(model(ids), torch.randint(0, 2, (a.batch,)))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    size = sys.getsizeof(cache) + sum(
        sys.getsizeof(k) + sys.getsizeof(v) + sum(sys.getsizeof(i) for i in v)
        for k, v in cache.items())
    _truth.write(steps=a.steps, kept_bytes_per_step=size / a.steps, entries=len(cache))
    print("steps %d cache %d entries loss %.4f" % (a.steps, len(cache), loss.item()))


if __name__ == "__main__":
    main()
