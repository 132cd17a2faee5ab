"""An autoencoder whose encoder and decoder have optimizers of their own (different learning
rates), both stepped every iteration, zero_grad on each; the loss logged as a float. Clean.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 0,
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    enc = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 32))
    dec = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 784))
    oe = torch.optim.Adam(enc.parameters(), lr=1e-3)
    od = torch.optim.SGD(dec.parameters(), lr=1e-2, momentum=0.9)
    log = []
    for step in range(a.steps):
        x = torch.rand(128, 784)
        loss = F.mse_loss(dec(enc(x)), x)
        oe.zero_grad()
        od.zero_grad()
        loss.backward()
        oe.step()
        od.step()
        log.append(loss.item())
    _truth.write(steps=a.steps)
    print("loss %.4f" % log[-1])


if __name__ == "__main__":
    main()
