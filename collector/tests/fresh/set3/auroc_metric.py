"""Multi-label tagger trained on a stream, logging a running torchmetrics AUROC.

A small MLP tags synthetic feature vectors with 40 labels.  The data is an
endless stream (an IterableDataset), so there are no epochs; the script
updates ``train_auroc = MultilabelAUROC(num_labels=40)`` with every batch's
probabilities and targets and logs ``train_auroc.compute()`` every LOG_EVERY
steps.  It never calls ``train_auroc.reset()``.  With the default
``thresholds=None`` the metric computes an exact AUROC, so it keeps every
prediction and target tensor it has been given in its list states
(``preds`` / ``target``).

Correct diagnosis: resident memory grows linearly with training steps and
without bound.  The metric's state grows by one batch of predictions plus
targets per step (``metric_bytes_per_step``, 240 KiB); the resident memory
grows 2.5-3x faster (``rss_floor_slope_per_step``) because every logged
``compute()`` concatenates the whole state into a transient of the same size,
whose high-water mark stays in the heap - so the floor climbs in small stairs,
one per LOG_EVERY steps, on a straight line.  All of it is caused by the
torchmetrics object ``train_auroc``, whose list states accumulate all
predictions and targets.  Fix: reset the
metric after each logging window (``train_auroc.reset()`` after compute), or
use a binned metric (``thresholds=`` an int) whose state has a fixed size.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "rss_floor_slope_per_step",
    "rate_tolerance": 0.33,
    "holder": "train_auroc",
    "memory_kind": "tensors",
    "advice": "Call train_auroc.reset() after each logged compute (or use a binned AUROC with thresholds=N) so the metric stops keeping every prediction and target.",
    "findings": ["leak"],
    "absent": ["model-copies", "reference-cycles", "worker-private-growth"],
    "words": ["train_auroc"],
    "no_words": [],
    "holder_bytes_key": "metric_state_bytes",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402
from torchmetrics.classification import MultilabelAUROC  # noqa: E402

torch.manual_seed(0)

STEPS = _truth.pick(600, 30)
LOG_EVERY = _truth.pick(50, 10)
BATCH = 512
FEAT = 256
LABELS = 40


class TagStream(IterableDataset):
    """Endless stream of (features, multi-hot tags) batches."""

    def __init__(self, seed):
        self.seed = seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        w = torch.randn(FEAT, LABELS, generator=g) / FEAT ** 0.5
        while True:
            x = torch.randn(BATCH, FEAT, generator=g)
            p = torch.sigmoid(3 * x @ w - 1.0)
            y = (torch.rand(BATCH, LABELS, generator=g) < p).long()
            yield x, y


def main():
    stream = DataLoader(TagStream(1), batch_size=None)
    model = nn.Sequential(nn.Linear(FEAT, 512), nn.ReLU(), nn.Linear(512, LABELS))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_auroc = MultilabelAUROC(num_labels=LABELS, average="macro")
    floor = _truth.Floor()
    state_bytes = []
    for step, (x, y) in enumerate(stream):
        if step >= STEPS:
            break
        logits = model(x)
        loss = F.binary_cross_entropy_with_logits(logits, y.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        train_auroc.update(torch.sigmoid(logits.detach()), y)
        if (step + 1) % LOG_EVERY == 0:
            auc = train_auroc.compute()
            print(f"step {step + 1:4d}  loss {loss.item():.4f}  train_auroc {auc.item():.4f}  "
                  f"rss {_truth.rss() / _truth.MiB:7.1f} MiB")
        floor.end_unit()
        if step % 10 == 0:
            state_bytes.append((step, _truth.storage_bytes(
                list(train_auroc.preds) + list(train_auroc.target))))

    xs = [s for s, _ in state_bytes]
    ys = [b for _, b in state_bytes]
    _truth.write(
        steps=STEPS,
        rss_floor_slope_per_step=floor.rate(skip_frac=0.1),
        metric_bytes_per_step=_truth.slope(xs, ys),
        metric_state_bytes=ys[-1],
        metric_list_len=len(train_auroc.preds),
        rss_floor_growth=floor.floors[-1] - floor.floors[0],
        **floor.summary("step"),
    )


if __name__ == "__main__":
    main()
