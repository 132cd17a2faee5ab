"""Epoch-end copies kept in a list (issue 42, case 2): an MLP trained for 6 epochs of 30 steps,
and at each epoch's end `copy.deepcopy(model.state_dict())` appended to `history` (the "keep
every epoch's weights" pattern). Flat within epochs; one jump per epoch end. The rate is checked
against the copies' own bytes (32.5 MiB an epoch); the resident bytes the program gained per
epoch by its own reading (`/proc/self/statm`, the median over epoch starts) are in the truth
file too: 17-50 MB in four runs, as the C allocator's heap moves by whole buffers. So the rate
(read from the resident floors) is held to half the copies' bytes, not a third: 47 MiB an epoch
was seen once in four runs on a loaded machine.

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "worker-private-growth"],
    "words": ["epoch"],
    "no_words": ["/step at"],
    "rate_per": "epoch",
    "rate_tolerance": 0.5,
}
"""

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

history = []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=2048)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(a.width, a.width), nn.ReLU(), nn.Linear(a.width, a.width),
                          nn.ReLU(), nn.Linear(a.width, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = [(torch.randn(16, a.width), torch.randn(16, 64)) for _ in range(a.steps)]
    loader = torch.utils.data.DataLoader(data, batch_size=None, shuffle=True)
    kept = 0
    rss_at_start = []
    for epoch in range(a.epochs):
        rss_at_start.append(_truth.rss_bytes())
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        snapshot = copy.deepcopy(model.state_dict())
        history.append(snapshot)
        kept += _truth.storage_bytes(snapshot.values())
    rss_at_start.append(_truth.rss_bytes())
    gains = sorted(b - a for a, b in zip(rss_at_start[1:], rss_at_start[2:]))
    _truth.write(epochs=a.epochs, steps=a.epochs * a.steps,
                 kept_bytes_per_epoch=kept / a.epochs,
                 rss_gain_per_epoch=gains[len(gains) // 2])
    print("epochs %d loss %.4f" % (a.epochs, loss.item()))


if __name__ == "__main__":
    main()
