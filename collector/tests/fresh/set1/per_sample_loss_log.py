"""Classifier training that logs a record per training sample for error analysis.

An MLP classifies synthetic 256-d features into 100 classes (batch 256, Adam,
16 epochs of 200 steps over a 51 200-sample training set). To find hard and
mislabelled examples later, the loop computes per-sample losses
(`reduction="none"`) and appends one dict per sample to `sample_log`: {"file",
"epoch", "loss", "pred", "confidence"}, with `.tolist()` so no tensors are
kept. The plan is to write it to a file at the end, so nothing is ever
dropped: `sample_log` grows by 256 small dicts (~94 KB of Python objects by
sys.getsizeof: the dict, a new str file name, floats and ints; ~89 KB of RSS)
every optimizer step, linearly and without bound (~270 MiB after 3200 steps).
Tensor memory is flat; the growth is Python objects held by one list. A
correct diagnosis reports linear growth per step held by `sample_log` (Python
objects, not tensors), and advises streaming the records to disk in chunks
(CSV/Parquet writer) or keeping running per-sample aggregates instead of every
record.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "growth_per_step",
    "rate_tolerance": 0.33,
    "holder": "sample_log",
    "memory_kind": "python_objects",
    "advice": "write the records to disk in chunks instead of keeping them in a list",
    "findings": ["leak"],
    "absent": ["reference-cycles", "worker-private-growth", "eval-retains-memory"],
    "words": ["sample_log"],
    "no_words": ["DataLoader"],
    "holder_bytes_key": "sample_log_bytes",
}
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
N_TRAIN, FEATURES, CLASSES, BATCH, EPOCHS = 51_200, 256, 100, 256, 16

centers = torch.randn(CLASSES, FEATURES)
labels = torch.randint(0, CLASSES, (N_TRAIN,))
features = centers[labels] + 1.5 * torch.randn(N_TRAIN, FEATURES)
flip = torch.rand(N_TRAIN) < 0.05  # some label noise worth finding
labels[flip] = torch.randint(0, CLASSES, (int(flip.sum()),))
file_names = [f"shard{i // 10_000:02d}/img_{i:07d}.jpg" for i in range(N_TRAIN)]

model = nn.Sequential(nn.Linear(FEATURES, 512), nn.GELU(), nn.Linear(512, CLASSES))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
sample_log = []

rss_start, rss, step = _truth.rss_bytes(), {}, 0
for epoch in range(EPOCHS):
    order = torch.randperm(N_TRAIN)
    for start in range(0, N_TRAIN, BATCH):
        idx = order[start:start + BATCH]
        logits = model(features[idx])
        losses = F.cross_entropy(logits, labels[idx], reduction="none")
        loss = losses.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        conf, pred = logits.detach().softmax(-1).max(1)
        for i, l, p, c in zip(idx.tolist(), losses.tolist(), pred.tolist(), conf.tolist()):
            sample_log.append({"file": file_names[i].replace("/", "__"), "epoch": epoch,
                               "loss": l, "pred": p, "confidence": c})
        step += 1
        rss[step] = _truth.rss_bytes()
    print(f"epoch {epoch} loss {loss.item():.3f} logged {len(sample_log)} records")

hardest = sorted(sample_log[-N_TRAIN:], key=lambda r: -r["loss"])[:5]
print("hardest:", [r["file"] for r in hardest])

log_bytes = sys.getsizeof(sample_log) + sum(
    sys.getsizeof(r) + sum(sys.getsizeof(v) for v in r.values()) for r in sample_log)
_truth.write(
    unit="optimizer_step",
    optimizer_steps=step,
    records=len(sample_log),
    sample_log_bytes=log_bytes,
    sample_log_bytes_per_step=log_bytes / step,
    rss_start=rss_start,
    rss_step_50=rss[50],
    rss_end=_truth.rss_bytes(),
    rss_every_200_steps=[rss[s] for s in range(200, step + 1, 200)],
    growth_per_step=(rss[step] - rss[50]) / (step - 50),
)
