"""A clean training loop (nothing to find): an MLP with AdamW for 60 steps, a validation under
`no_grad` every 20 steps whose losses are kept as floats. Its peak is inside the loop; what the
interpreter adds while it shuts down is not the run's.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles",
               "worker-private-growth", "model-copies"],
    "no_words": ["after the last mark"],
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val = [(torch.randn(256, 1024), torch.randint(0, 10, (256,))) for _ in range(4)]
    val_losses = []
    for step in range(a.steps):
        x, y = torch.randn(128, 1024), torch.randint(0, 10, (128,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0:
            model.eval()
            with torch.no_grad():
                val_losses.append(sum(F.cross_entropy(model(vx), vy).item() for vx, vy in val))
            model.train()
    _truth.write(steps=a.steps, evals=4 * (a.steps // 20))
    print("steps %d loss %.4f val %.4f" % (a.steps, loss.item(), val_losses[-1]))


if __name__ == "__main__":
    main()
