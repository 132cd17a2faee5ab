"""A real diffusion-style PyTorch loop (knows nothing about oomscope): a frozen encoder (eval
mode, no parameter requires grad, run under torch.no_grad() every step, as a VAE or a text
encoder is), a trained denoiser with AdamW, an EMA copy of it updated after each step, and every
`--eval-every` steps an evaluation of the EMA copy on a few batches. Prints the last loss."""

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--eval-batches", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    torch.manual_seed(0)
    d, z = 256, 64
    encoder = nn.Sequential(nn.Linear(d, 256), nn.SiLU(), nn.Linear(256, z))
    encoder.requires_grad_(False).eval()
    model = nn.Sequential(nn.Linear(z, 256), nn.SiLU(), nn.Linear(256, z))
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(a.steps):
        x = torch.randn(a.batch, d)
        with torch.no_grad():
            latents = encoder(x)
        noise = torch.randn_like(latents)
        loss = F.mse_loss(model(latents + noise), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for e, m in zip(ema.parameters(), model.parameters()):
                e.lerp_(m, 0.01)
        if a.eval_every and (step + 1) % a.eval_every == 0:
            with torch.no_grad():
                total = 0.0
                for _ in range(a.eval_batches):
                    lat = encoder(torch.randn(a.batch, d))
                    n = torch.randn_like(lat)
                    total += F.mse_loss(ema(lat + n), n).item()
    print("steps %d loss %.4f" % (a.steps, loss.item()))


if __name__ == "__main__":
    main()
