"""A hand-written metric whose state is never reset: an `Accuracy` object's `update()` appends
each step's detached predictions to `self.preds` (to compute at the end of the epoch) and the
loop never calls `compute()`/`reset()`. 2 MiB a step of probabilities, kept (the holder's rate);
the leak's rate, of the resident bytes, is checked against the resident bytes the program gained
a step by its own reading (`/proc/self/statm`, from step 5 on), the C allocator's share with it.

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "reference-cycles"],
    "words": ["list `preds` of the `Accuracy` object", "(2.00 MiB/step)"],
    "no_words": ["autograd graph)"],
    "rate_per": "step",
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Accuracy:
    def __init__(self):
        self.preds, self.targets = [], []

    def update(self, logits, y):
        self.preds.append(logits.detach().softmax(-1))
        self.targets.append(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 512))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    metric = Accuracy()
    rss_at_5 = None
    for step in range(a.steps):
        if step == 5:
            rss_at_5 = _truth.rss_bytes()
        x, y = torch.randn(1024, 128), torch.randint(0, 512, (1024,))
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        metric.update(logits, y)
    kept = _truth.storage_bytes(metric.preds + metric.targets)
    _truth.write(steps=a.steps, tensor_bytes_per_step=kept / a.steps,
                 kept_bytes_per_step=(_truth.rss_bytes() - rss_at_5) / (a.steps - 5))
    print("kept %d" % len(metric.preds))


if __name__ == "__main__":
    main()
