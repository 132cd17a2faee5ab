"""A fast real PyTorch loop (knows nothing about oomscope): a small MLP classifier, AdamW, a
DataLoader with worker processes over an in-memory dataset, a few milliseconds a step — where a
fixed cost per step (the zero-code hooks') shows most. Prints the final loss."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(a.steps * a.batch // 4, 128)
    y = torch.randint(0, 10, (len(x),))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=a.batch,
                                         shuffle=True, num_workers=a.workers,
                                         persistent_workers=a.workers > 0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = 0
    while step < a.steps:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == a.steps:
                break
    print("steps %d loss %.4f" % (step, loss.item()))


if __name__ == "__main__":
    main()
