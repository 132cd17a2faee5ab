"""An exponential moving average of the weights (the way timm's ModelEmaV2 keeps one): a deep
copy of the model made once, updated in place after every optimizer step under `no_grad`, and
evaluated every 30 steps by a `validate(model)` that puts the model it is given in `eval()`, as
timm's train.py does. A second copy of the weights, but a constant one: no leak.

EXPECT = {
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 2,
}
"""

import argparse
import copy

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
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10))
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val = (torch.randn(256, 512), torch.randint(0, 10, (256,)))
    scores, evals = [], 0

    @torch.no_grad()
    def validate(m):
        m.eval()
        return F.cross_entropy(m(val[0]), val[1]).item()

    for step in range(1, a.steps + 1):
        x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(0.999).add_(pm, alpha=0.001)
        if step % 30 == 0:
            scores.append(validate(ema))
            evals += 1
    _truth.write(steps=a.steps, evals=evals)
    print("ema val %.4f" % scores[-1])


if __name__ == "__main__":
    main()
