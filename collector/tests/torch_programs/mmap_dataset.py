"""A real PyTorch loop over a memory-mapped dataset (knows nothing about oomscope): the samples
live in a float32 `np.memmap` file (written first, `--mib` of it), read sequentially, one slice
per step, and trained on with a small MLP and AdamW. The resident pages of the mapped file grow
with every step — file-backed pages the kernel can drop at will, not a leak."""

import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="the dataset file (written if absent)")
    p.add_argument("--mib", type=int, default=512)
    p.add_argument("--steps", type=int, default=100)
    a = p.parse_args()
    torch.manual_seed(0)
    width = 256
    rows = a.mib * (1 << 20) // (4 * width)
    if not os.path.exists(a.data) or os.path.getsize(a.data) != rows * width * 4:
        with open(a.data, "wb") as f:
            chunk = np.random.default_rng(0).standard_normal((1 << 14, width), dtype=np.float32)
            for _ in range(rows // len(chunk)):
                f.write(chunk.tobytes())
    data = np.memmap(a.data, dtype=np.float32, mode="r", shape=(rows, width))
    per_step = rows // a.steps
    model = nn.Sequential(nn.Linear(width, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(a.steps):
        block = torch.from_numpy(np.asarray(data[step * per_step:(step + 1) * per_step]))
        x = block[::64]  # a batch from the step's slice; the whole slice was read (paged in)
        checksum = float(block.sum())
        loss = F.mse_loss(model(x), x[:, :1]) + 0 * checksum
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("steps %d loss %.4f" % (a.steps, loss.item()))


if __name__ == "__main__":
    main()
