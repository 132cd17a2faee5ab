"""Epoch-end copies kept in a list (issue 42, case 2): an MLP trained for 6 epochs of 30 steps,
and at each epoch's end `copy.deepcopy(model.state_dict())` appended to `history` (the "keep
every epoch's weights" pattern). Flat within epochs; one jump per epoch end.

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "worker-private-growth"],
    "words": ["epoch"],
    "no_words": ["/step at"],
    "rate_per": "epoch",
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
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        snapshot = copy.deepcopy(model.state_dict())
        history.append(snapshot)
        kept += _truth.storage_bytes(snapshot.values())
    _truth.write(epochs=a.epochs, steps=a.epochs * a.steps, kept_bytes_per_epoch=kept / a.epochs)
    print("epochs %d loss %.4f" % (a.epochs, loss.item()))


if __name__ == "__main__":
    main()
