"""CNN trained with progressive resizing: image size 32 -> 64 -> 96 -> 128.

A small ConvNet (3 conv-BN-ReLU stages, global pooling, linear head, ~25 k
parameters) learns to tell which quadrant of a noisy image holds a bright
blob. Following the fast.ai "progressive resizing" recipe, the same synthetic
images are rendered at 128x128 and downsampled with F.interpolate to the
current stage's size: 40 steps each at 32, 64, 96 and 128 pixels, batch 32,
SGD with momentum and a OneCycle schedule. The activations saved for backward
scale with the pixel count (measured: 7 MiB per step at 32 px, 30 at 64, 66 at
96, 118 MiB at 128 px) and are freed after every backward, so each stage has a
higher per-step peak than the last (peak RSS ~695, 750, 915, 1070 MiB) and
nothing accumulates between steps: memory follows the input size. The RSS
between steps also steps up with the stage (malloc keeps some freed heap for
reuse), but no tensor outlives its step. The model, gradients and optimizer
state are negligible; activations are almost all of the peak. A correct
diagnosis says the peak follows the image size of the schedule (highest in the
128 px stage), that activations dominate it, and that there is no leak; if the
last stage's peak were too high, a smaller batch at 128 px or activation
checkpointing would lower it.

EXPECT = {
    "symptom": "follows_input",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": None,
    "memory_kind": "tensors",
    "advice": None,
    "findings": ["activations-dominate"],
    "absent": ["leak", "eval-retains-memory", "reference-cycles", "optimizer-state-heavy",
               "worker-private-growth"],
    "words": [],
    "no_words": ["DataLoader"],
    "peak_key": "peak_rss_bytes",
}
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
SIZES, STEPS_PER_SIZE, BATCH, FULL = (32, 64, 96, 128), 40, 32, 128


def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=False))


model = nn.Sequential(conv_bn(3, 16, 1), conv_bn(16, 32, 2), conv_bn(32, 64, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.2,
                                                total_steps=len(SIZES) * STEPS_PER_SIZE)
yy, xx = torch.meshgrid(torch.arange(FULL), torch.arange(FULL), indexing="ij")


def render_batch(n):
    label = torch.randint(0, 4, (n,))
    cy = (label // 2) * 64 + torch.randint(12, 52, (n,))
    cx = (label % 2) * 64 + torch.randint(12, 52, (n,))
    blob = torch.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / 80.0)
    img = 0.5 * torch.randn(n, 3, FULL, FULL) + blob[:, None] * torch.rand(n, 3, 1, 1)
    return img, label


def saved_activation_bytes(x, y):
    """Bytes autograd saves for backward in one training forward."""
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.zero_grad()
    return sum(seen.values())


rss_start, stages, step = _truth.rss_bytes(), [], 0
for size in SIZES:
    floors = []
    for i in range(STEPS_PER_SIZE):
        img, y = render_batch(BATCH)
        x = F.interpolate(img, size=(size, size), mode="bilinear", antialias=True,
                          align_corners=False) if size != FULL else img
        if i == 0:
            saved = saved_activation_bytes(x, y)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        floors.append(_truth.rss_bytes())
    stages.append({"size": size, "end_step": step, "input_bytes": x.numel() * 4,
                   "saved_activation_bytes": saved, "peak_rss_so_far": _truth.peak_rss_bytes(),
                   "floor_rss_min": min(floors), "floor_rss_max": max(floors)})
    print(f"size {size} loss {loss.item():.3f} saved {saved / 2**20:.0f} MiB "
          f"peak RSS {stages[-1]['peak_rss_so_far'] / 2**20:.0f} MiB")

state_bytes = _truth.storage_bytes(list(model.parameters()) + [
    t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)])
_truth.write(
    unit="optimizer_step",
    optimizer_steps=step,
    stages=stages,
    param_and_state_bytes=state_bytes,
    rss_start=rss_start,
    rss_end=_truth.rss_bytes(),
    peak_step_range=[step - STEPS_PER_SIZE + 1, step],
)
