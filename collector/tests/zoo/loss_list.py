"""Validation losses kept with their graphs: a small CNN on synthetic images that, every step,
also computes a loss on a held-out batch without `torch.no_grad()` and appends the tensor (not
`.item()`) to `val_losses` to plot later. Each kept loss holds its forward's autograd graph and
the activations it saved (8 MiB a step: the storages one such forward saves for backward,
through `torch.autograd.graph.saved_tensors_hooks`, less the parameters and the held-out batch
every step shares). The leak's rate, of the resident bytes, is checked against the resident
bytes the program gained a step by its own reading (`/proc/self/statm`, from step 5 on; ~12 MiB
a step, as the C allocator keeps more than the buffers).

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "reference-cycles"],
    "words": ["val_losses", ".item()"],
    "rate_per": "step",
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

val_losses = []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    xv, yv = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
    shared = {t.untyped_storage().data_ptr() for t in [xv, *model.parameters()]}
    saved = []
    rss_at_5 = None
    for step in range(a.steps):
        if step == 5:
            rss_at_5 = _truth.rss_bytes()
        x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1:
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t,
                                                          lambda t: t):
                val_losses.append(F.cross_entropy(model(xv), yv))
        else:
            val_losses.append(F.cross_entropy(model(xv), yv))
    own = [t for t in saved if t.untyped_storage().data_ptr() not in shared]
    _truth.write(steps=a.steps, saved_bytes_per_step=_truth.storage_bytes(own),
                 kept_bytes_per_step=(_truth.rss_bytes() - rss_at_5) / (a.steps - 5))
    print("val loss %.4f" % (sum(v.item() for v in val_losses) / len(val_losses)))


if __name__ == "__main__":
    main()
