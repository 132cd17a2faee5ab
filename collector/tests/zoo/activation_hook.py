"""Activations kept by a forward hook: a feature-extraction hook on the model's middle layer
appends its output (detached) to a module-level list `features` and nothing ever reads or clears
it: a "for later analysis" that grows each step by one batch's activations (2 MiB). Nothing else
leaks. The leak's rate (of the resident bytes) is checked against the resident bytes the program
gained a step by its own reading (`/proc/self/statm`, from step 5 on): ~3 MiB a step, as the C
allocator keeps more than the 2 MiB buffers themselves; the holder's rate against the buffers.

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "reference-cycles"],
    "no_words": [".item() or .detach() (it keeps"],
    "words": ["features", "2.00 MiB/step"],
    "rate_per": "step",
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

features = []


def keep(module, inputs, output):
    features.append(output.detach())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10))
    model[1].register_forward_hook(keep)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rss_at_5 = None
    for step in range(a.steps):
        if step == 5:
            rss_at_5 = _truth.rss_bytes()
        x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    kept = _truth.storage_bytes(features)
    _truth.write(steps=a.steps, tensor_bytes_per_step=kept / a.steps,
                 kept_bytes_per_step=(_truth.rss_bytes() - rss_at_5) / (a.steps - 5))
    print("features %d loss %.4f" % (len(features), loss.item()))


if __name__ == "__main__":
    main()
