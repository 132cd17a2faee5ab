"""MLP-mixer style regressor whose training loop re-attaches activation-monitor hooks every epoch.

To log how many GELU units are dead per block, the script calls
``attach_activation_monitor(model)`` at the start of EVERY epoch.  That
function registers a forward hook on each GELU; the hook stores the latest
output (``captured[name] = output.detach().clone()``) in a dict created by (and captured
in the closure of) that call, and the epoch-end logging reads the newest dict.
The handles returned by ``register_forward_hook`` are thrown away, so the hooks
of all previous epochs stay registered in each module's ``_forward_hooks`` and
keep firing; each of them keeps its own copy of the latest activation.

Correct diagnosis: memory grows in a staircase, one stair per epoch (at the
first forward pass after the new hooks are attached), each stair the size of
one batch's GELU activations of all blocks (``stair_bytes``), and it never
comes back; the floor is flat inside an epoch.  The memory is held by the
closures of the forward hooks (``captured`` dicts) kept alive by the modules'
``_forward_hooks``.  Fix: register the monitor hooks once, or keep the handles
and call ``handle.remove()`` at the end of each epoch.

EXPECT = {
    "symptom": "staircase",
    "unit": "epoch",
    "rate_key": "rss_floor_slope_per_epoch",
    "rate_tolerance": 0.33,
    "holder": "captured",
    "memory_kind": "tensors",
    "advice": "Register the activation-monitor hooks once (or keep the handles from register_forward_hook and call handle.remove() at the end of each epoch) so old hooks and their captured activations are released.",
    "findings": ["leak"],
    "absent": ["model-copies", "reference-cycles", "eval-retains-memory"],
    "words": ["hook"],
    "no_words": [],
    "stair_key": "stair_bytes",
    "holder_bytes_key": "captured_bytes",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

EPOCHS = _truth.pick(24, 4)
STEPS_PER_EPOCH = _truth.pick(12, 3)
BATCH = 256
D = 256
HIDDEN = 1024
BLOCKS = 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, HIDDEN)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(HIDDEN, D)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, D)
        self.blocks = nn.Sequential(*[Block() for _ in range(BLOCKS)])
        self.out = nn.Linear(D, 1)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x))).squeeze(1)


def attach_activation_monitor(model):
    captured = {}

    def make_hook(name):
        def hook(module, inputs, output):
            # clone: later in-place ops must not change what we log
            captured[name] = output.detach().clone()
        return hook

    for name, module in model.named_modules():
        if isinstance(module, nn.GELU):
            module.register_forward_hook(make_hook(name))
    return captured


def dead_fraction(captured):
    return {k: (v <= 0).float().mean().item() for k, v in captured.items()}


def all_captured(model):
    """Every tensor kept by any registered forward hook's closure."""
    out = []
    for m in model.modules():
        for h in m._forward_hooks.values():
            for cell in (h.__closure__ or ()):
                c = cell.cell_contents
                if isinstance(c, dict):
                    out.extend(v for v in c.values() if isinstance(v, torch.Tensor))
    return out


def main():
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(64, generator=g)
    model = Regressor()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    floor = _truth.Floor()
    for epoch in range(EPOCHS):
        captured = attach_activation_monitor(model)
        for _ in range(STEPS_PER_EPOCH):
            x = torch.randn(BATCH, 64, generator=g)
            y = torch.sin(x @ w_true) + 0.1 * torch.randn(BATCH, generator=g)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            floor.sample()
        dead = dead_fraction(captured)
        floor.end_unit()
        print(f"epoch {epoch:2d}  loss {loss.item():.4f}  "
              f"dead {sum(dead.values()) / len(dead):.3f}  "
              f"rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    stair = BLOCKS * BATCH * HIDDEN * 4
    n_hooks = sum(len(m._forward_hooks) for m in model.modules())
    _truth.write(
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        stair_bytes=stair,
        hooks_registered=n_hooks,
        captured_bytes=_truth.storage_bytes(all_captured(model)),
        rss_floor_slope_per_epoch=floor.rate(skip_frac=0.1),
        rss_floor_growth=floor.floors[-1] - floor.floors[0],
        **floor.summary("epoch"),
    )


if __name__ == "__main__":
    main()
