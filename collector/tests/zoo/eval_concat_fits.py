"""An eval that concatenates all logits and fits: every 40 steps, an eval under `no_grad` keeps
each batch's logits in a local list and `torch.cat`s them for an accuracy, then drops them.
Memory rises during the eval and falls after it: the eval's peak is above training's (the
`torch.cat(all_logits)` pattern), but nothing is kept after it: no leak, no retention.

EXPECT = {
    "findings": ["eval-peak"],
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "words": ["batch by batch"],
    "evals": 2,
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 8192))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    val = [torch.randn(256, 128) for _ in range(24)]
    evals, acc = 0, []
    for step in range(1, a.steps + 1):
        x, y = torch.randn(32, 128), torch.randint(0, 8192, (32,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 40 == 0:
            model.eval()
            with torch.no_grad():
                all_logits = [model(v) for v in val]  # 8 MiB a batch
                acc.append(torch.cat(all_logits).argmax(1).float().mean().item())
            del all_logits
            model.train()
            evals += 1
    _truth.write(steps=a.steps, evals=evals)
    print("acc %.4f" % acc[-1])


if __name__ == "__main__":
    main()
