"""A small, real DistributedDataParallel program (gloo, CPU) for oomscope's zero-code tests,
started by torchrun: it knows nothing about oomscope. Each rank trains a two-layer MLP on its
own shard of a fixed regression task and prints its final loss."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        x = torch.randn(16, 32, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("rank %d of %d (local %s): final loss %.4f" % (
        rank, dist.get_world_size(), os.environ.get("LOCAL_RANK"), loss.item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
