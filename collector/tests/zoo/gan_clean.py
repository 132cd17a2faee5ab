"""A clean GAN loop with two optimizers (generator, discriminator), the DCGAN-style alternation:
each iteration steps both. Nothing is kept across steps: no leak, no eval.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles", "model-copies"],
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
    g = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 784), nn.Tanh())
    d = nn.Sequential(nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))
    og = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    od = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.randn(64, 784).tanh()
    for step in range(a.steps):
        z = torch.randn(64, 64)
        fake = g(z)
        ld = F.binary_cross_entropy_with_logits(d(real), torch.ones(64, 1)) + \
            F.binary_cross_entropy_with_logits(d(fake.detach()), torch.zeros(64, 1))
        od.zero_grad(set_to_none=True)
        ld.backward()
        od.step()
        lg = F.binary_cross_entropy_with_logits(d(fake), torch.ones(64, 1))
        og.zero_grad(set_to_none=True)
        lg.backward()
        og.step()
    _truth.write(steps=a.steps)
    print("d %.3f g %.3f" % (ld.item(), lg.item()))


if __name__ == "__main__":
    main()
