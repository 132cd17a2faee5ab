"""Memory that only the garbage collector frees (knows nothing about oomscope): each step keeps a
record of its batch in an object that refers to itself (a reference cycle, as a callback or a
caught exception's traceback makes one), so when the program drops it, only a collection frees
the 4 MiB tensor it holds. `--collect-every N`: the program calls gc.collect() every N steps (as
loops that "release memory" do); otherwise Python's own thresholds decide. A clean MLP loop with
AdamW on CPU around it. Prints the last loss."""

import argparse
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F


class StepRecord:
    def __init__(self, batch):
        self.batch = batch.clone()
        self.me = self  # the cycle


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--collect-every", type=int, default=20)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gc.disable()  # as a loop that manages collections itself does
    for step in range(a.steps):
        x = torch.randn(1024, 1024)
        record = StepRecord(x)
        loss = F.mse_loss(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del record
        if a.collect_every and (step + 1) % a.collect_every == 0:
            gc.collect()
    print("steps %d loss %.4f" % (a.steps, loss.item()))


if __name__ == "__main__":
    main()
