"""A tokenizer cache done right: `functools.lru_cache(maxsize=512)` on the tokenize function of a
text classifier's loop, with texts drawn from an open-ended stream (most are new). The cache
fills to its bound and stays there: no leak.

EXPECT = {
    "absent": ["leak", "eval-peak", "reference-cycles"],
    "no_words": ["after the last mark"],
}
"""

import argparse
import functools
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


@functools.lru_cache(maxsize=512)
def tokenize(text):
    return [hash(w) % 5000 for w in text.split()]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rnd = random.Random(0)
    model = nn.EmbeddingBag(5000, 64)
    head = nn.Linear(64, 2)
    opt = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3)
    for step in range(a.steps):
        texts = [" ".join("w%d" % rnd.randrange(10**9) for _ in range(64)) for _ in range(64)]
        ids = [torch.tensor(tokenize(t)) for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        logits = head(model(torch.cat(ids), offsets))
        loss = F.cross_entropy(logits, torch.randint(0, 2, (64,)))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _truth.write(steps=a.steps, cache=tokenize.cache_info().currsize)
    print("cache %d" % tokenize.cache_info().currsize)


if __name__ == "__main__":
    main()
