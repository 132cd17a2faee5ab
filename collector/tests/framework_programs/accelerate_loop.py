"""A real Hugging Face `accelerate` training loop (knows nothing about oomscope), as its docs write
it: `Accelerator()`, `prepare(model, optimizer, dataloader)`, `accelerator.backward(loss)`; a tiny
random-weight MLP on synthetic data on the CPU (gloo), for `accelerate launch --multi_gpu
--num_processes N` (torchrun underneath: N ranks) or `accelerate launch --cpu` (one process, the
script a child of the launcher). Prints each rank's last loss."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=1024)
    a = p.parse_args()
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(a.width, 4 * a.width), nn.GELU(), nn.Linear(4 * a.width, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n = a.steps * a.batch * accelerator.num_processes
    data = TensorDataset(torch.randn(n, a.width), torch.randint(0, 16, (n,)))
    loader = DataLoader(data, batch_size=a.batch, shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    for x, y in loader:
        out = model(x)
        loss = F.cross_entropy(out, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    print("rank %d steps %d loss %.4f" % (accelerator.process_index, len(loader), loss.item()))


if __name__ == "__main__":
    main()
