"""A real two-optimizer PyTorch loop (knows nothing about oomscope): pytorch/examples' DCGAN
iteration on synthetic images, with small MLPs for speed. Each iteration steps the
discriminator (real and fake batches, one backward each), then the generator (a forward of the
discriminator on the fakes, a backward); with `--critic N` the discriminator steps N times per
generator step (WGAN's schedule). Prints the losses of the last iteration."""

import argparse

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--critic", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    torch.manual_seed(0)
    nz, side = 16, 8 * 8
    netG = nn.Sequential(nn.Linear(nz, 128), nn.ReLU(), nn.Linear(128, side), nn.Tanh())
    netD = nn.Sequential(nn.Linear(side, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
    criterion = nn.BCEWithLogitsLoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real_label, fake_label = 1.0, 0.0
    for i in range(a.iters):
        for _ in range(a.critic):
            # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            real = torch.rand(a.batch, side) * 2 - 1
            label = torch.full((a.batch, 1), real_label)
            errD_real = criterion(netD(real), label)
            errD_real.backward()
            fake = netG(torch.randn(a.batch, nz))
            label.fill_(fake_label)
            errD_fake = criterion(netD(fake.detach()), label)
            errD_fake.backward()
            optimizerD.step()
        # (2) Update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        errG = criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()
    print("iterations %d loss_D %.4f loss_G %.4f" % (a.iters, (errD_real + errD_fake).item(), errG.item()))


if __name__ == "__main__":
    main()
