"""A clean accelerate loop: `Accelerator(gradient_accumulation_steps=2)` on the CPU, a small MLP
regressor over a DataLoader, `accelerator.accumulate(model)` around each micro-batch, loss
logged with `.item()`. Nothing grows.

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark", "has no step marks"],
    "evals": 0,
}
"""

import argparse
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from accelerate import Accelerator  # noqa: E402

import _truth  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=80)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(a.batches * 32, 256),
                                          torch.randn(a.batches * 32, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    total = 0.0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        total += loss.item()
    _truth.write(batches=a.batches)
    print("mean loss %.4f" % (total / a.batches))


if __name__ == "__main__":
    main()
