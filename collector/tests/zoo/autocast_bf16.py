"""Mixed precision on the CPU: `torch.autocast("cpu", dtype=torch.bfloat16)` around the forward
of a small transformer encoder, fp32 weights and AdamW, the loss logged with `.item()`. Clean.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark"],
    "evals": 0,
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(32 * 128, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    log = []
    for step in range(a.steps):
        x, y = torch.randn(32, 32, 128), torch.randint(0, 4, (32,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log.append(loss.item())
    _truth.write(steps=a.steps)
    print("loss %.4f" % log[-1])


if __name__ == "__main__":
    main()
