"""Four leaks users write (knows nothing about oomscope), one per `--kind`, in an otherwise
clean MLP loop with AdamW on CPU; each step also scores a held-out batch with autograd on, as
loops that log a validation loss often do:
- `list`: that loss appended to a list every step (`val_losses.append(val_loss)`), its autograd
  graph, and the activations the graph saved, kept with it;
- `metric`: a metric object whose state (a list of detached outputs) is never reset;
- `total`: the loss summed into a running total without `.item()` (`total_val += val_loss`),
  which keeps every step's graph behind one tensor;
- `default`: the held-out outputs kept by a logging function's mutable default argument
  (`def log_outputs(outputs, _seen=[])`), state that lives as long as the function.
Prints the last loss."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Accuracy:
    def __init__(self):
        self.preds = []

    def update(self, outputs):
        self.preds.append(outputs.detach())


def log_outputs(outputs, _seen=[]):
    _seen.append(outputs.detach())
    return len(_seen)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["list", "metric", "total", "default"], required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(a.width, a.width), nn.ReLU(),
                          nn.Linear(a.width, a.width)).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    global val_losses, metric, total_val
    val_losses, metric, total_val = [], Accuracy(), 0.0
    for step in range(a.steps):
        x = torch.randn(a.batch, a.width, device=a.device)
        out = model(x)
        loss = F.mse_loss(out, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        held_out = torch.randn(a.batch, a.width, device=a.device)
        val_out = model(held_out)
        val_loss = F.mse_loss(val_out, held_out)
        if a.kind == "list":
            val_losses.append(val_loss)
        elif a.kind == "metric":
            metric.update(val_out)
        elif a.kind == "default":
            log_outputs(val_out)
        else:
            total_val += val_loss
    print("steps %d loss %.4f" % (a.steps, loss.item()))


if __name__ == "__main__":
    main()
