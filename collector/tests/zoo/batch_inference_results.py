"""Offline batch inference that keeps every batch's outputs: a classifier under `no_grad()`
scores a stream of batches and appends each batch's probabilities to `results` to write them
out at the end (1 MiB a batch). No optimizer: the forward is the clock, and `results` is what
grows. Its resident memory grows 1 to 2 MiB a batch (the C allocator keeps some freed
intermediates' pages, more in some runs than others): the leak's rate is held to that, what
`results` is said to gain to its tensors' bytes.

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "eval-retains-memory", "reference-cycles"],
    "words": ["results", "/forward"],
    "no_words": ["autograd graph)", ".item() or .detach()"],
    "rate_per": "forward",
}
"""

import argparse

import torch
import torch.nn as nn

import _truth

results = []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=120)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1024)).eval()
    rss_at_10 = _truth.rss_bytes()
    with torch.no_grad():
        for b in range(a.batches):
            if b == 10:
                rss_at_10 = _truth.rss_bytes()
            results.append(model(torch.randn(256, 256)).softmax(-1))
    rss_per_batch = (_truth.rss_bytes() - rss_at_10) / max(a.batches - 10, 1)
    held = _truth.storage_bytes(results) / a.batches
    _truth.write(forwards=a.batches, kept_bytes_per_forward=rss_per_batch,
                 held_bytes_per_forward=held)
    print("scored %d" % len(results))


if __name__ == "__main__":
    main()
