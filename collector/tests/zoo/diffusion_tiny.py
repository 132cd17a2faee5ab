"""A tiny denoising-diffusion training loop: a small conv net conditioned on a sinusoidal
timestep embedding learns to predict the noise added to synthetic 32x32 images at random
timesteps of a linear beta schedule; the loss is logged with `.item()`. Clean.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 0,
}
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Denoiser(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.t = nn.Sequential(nn.Linear(64, c), nn.SiLU(), nn.Linear(c, c))
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.mid = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1),
                                 nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))
        self.out = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x, t):
        half = 32
        freqs = torch.exp(-math.log(10000) * torch.arange(half) / half)
        emb = torch.cat([torch.sin(t[:, None] * freqs), torch.cos(t[:, None] * freqs)], dim=1)
        h = self.inp(x) + self.t(emb)[:, :, None, None]
        return self.out(h + self.mid(h))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    betas = torch.linspace(1e-4, 0.02, 1000)
    alphas = torch.cumprod(1 - betas, 0)
    model = Denoiser()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for step in range(a.steps):
        x0 = torch.rand(16, 3, 32, 32) * 2 - 1
        t = torch.randint(0, 1000, (16,))
        noise = torch.randn_like(x0)
        ab = alphas[t][:, None, None, None]
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        loss = F.mse_loss(model(xt, t.float()), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = loss.item()
    _truth.write(steps=a.steps)
    print("loss %.4f" % last)


if __name__ == "__main__":
    main()
