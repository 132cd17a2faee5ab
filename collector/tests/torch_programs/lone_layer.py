"""A small MLP trained with AdamW beside a lone embedding table the script keeps in a variable
but never calls (knows nothing about oomscope): the table is no module's child and holds no
submodule, so only its name says it is there. Prints the last loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    global table
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    table = nn.Embedding(4096, 64)  # 1 MiB of float32, never run
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(12):
        loss = F.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("loss %.4f" % loss.item())


if __name__ == "__main__":
    main()
