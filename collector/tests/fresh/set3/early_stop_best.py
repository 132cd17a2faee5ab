"""Text classifier trained with an early-stopping callback that snapshots the best model.

A bag-of-words classifier (a large EmbeddingBag vocabulary table + a small MLP
head) is trained with SGD+momentum for a fixed number of epochs.  After each
epoch's validation the ``EarlyStopping`` callback, whenever the validation loss
improves, takes ``copy.deepcopy`` of the model's and the optimizer's
state_dicts into ``self.best_state`` (so training can be restored to the best
epoch) - replacing, not appending to, the previous snapshot.

Correct diagnosis: memory rises once, at the end of the first epoch, by one
snapshot (one copy of the weights plus one copy of the momentum buffers,
about ``best_state_bytes``), and then stays flat for the rest of the run even
though the snapshot is re-taken at every improvement: each new snapshot
replaces the old one, which is freed.  It is a deliberate, bounded cost of
keeping the best checkpoint in memory; there is no leak and nothing needs to
change.  (A transient second snapshot exists for a moment while the new one is
built.)

EXPECT = {
    "symptom": "bounded",
    "unit": "epoch",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "self.best_state",
    "memory_kind": "tensors",
    "advice": None,
    "findings": [],
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "words": [],
    "no_words": ["grows without bound", "unbounded growth"],
    "bound_key": "best_state_bytes",
    "holder_bytes_key": "best_state_bytes",
    "flat_rate_key": "rss_floor_slope_per_epoch_after_first",
}
"""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

VOCAB = _truth.pick(200_000, 20_000)
EMB = 64
CLASSES = 20
EPOCHS = _truth.pick(24, 4)
STEPS_PER_EPOCH = _truth.pick(16, 3)
BATCH = 256
DOC_LEN = 48


class BagClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, EMB, mode="mean")
        self.head = nn.Sequential(nn.Linear(EMB, 256), nn.ReLU(), nn.Linear(256, CLASSES))

    def forward(self, tokens):
        return self.head(self.embed(tokens))


class EarlyStopping:
    def __init__(self, patience=8):
        self.patience = patience
        self.best_loss = float("inf")
        self.best_epoch = -1
        self.best_state = None
        self.bad_epochs = 0
        self.snapshots_taken = 0

    def __call__(self, epoch, val_loss, model, optimizer):
        if val_loss < self.best_loss - 1e-4:
            self.best_loss = val_loss
            self.best_epoch = epoch
            self.bad_epochs = 0
            self.best_state = {
                "model": copy.deepcopy(model.state_dict()),
                "optimizer": copy.deepcopy(optimizer.state_dict()),
                "epoch": epoch,
            }
            self.snapshots_taken += 1
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience


def make_split(g, n, proto):
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    # each class prefers its own slice of the vocabulary, plus noise tokens
    topical = proto[labels][:, :DOC_LEN // 2]
    noise = torch.randint(0, VOCAB, (n, DOC_LEN - DOC_LEN // 2), generator=g)
    return torch.cat([topical, noise], 1), labels


def main():
    g = torch.Generator().manual_seed(1)
    proto = torch.randint(0, VOCAB, (CLASSES, 4000), generator=g)
    proto = proto[:, torch.randperm(4000, generator=g)[:DOC_LEN // 2]]
    model = BagClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    stopper = EarlyStopping()
    val_x, val_y = make_split(g, 2048, proto)
    vdrop = torch.rand(val_x.shape, generator=g) < 0.85
    val_x = torch.where(vdrop, torch.randint(0, VOCAB, val_x.shape, generator=g), val_x)
    epoch_floor = _truth.Floor()
    for epoch in range(EPOCHS):
        model.train()
        for _ in range(STEPS_PER_EPOCH):
            x, y = make_split(g, BATCH, proto)
            # corrupt part of the topical tokens so the task is learned gradually
            drop = torch.rand(x.shape, generator=g) < 0.85
            x = torch.where(drop, torch.randint(0, VOCAB, x.shape, generator=g), x)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            epoch_floor.sample()
        model.eval()
        with torch.no_grad():
            val_loss = F.cross_entropy(model(val_x), val_y).item()
        stop = stopper(epoch, val_loss, model, opt)
        epoch_floor.end_unit()
        print(f"epoch {epoch:2d}  val_loss {val_loss:.4f}  best {stopper.best_epoch}  "
              f"rss {_truth.rss() / _truth.MiB:7.1f} MiB")
        if stop:
            print("early stop")
            break

    best_bytes = _truth.holder_bytes(stopper.best_state)
    f = epoch_floor.floors
    after = f[1:]
    _truth.write(
        epochs_run=len(f),
        snapshots_taken=stopper.snapshots_taken,
        best_epoch=stopper.best_epoch,
        best_state_bytes=best_bytes,
        model_param_bytes=_truth.holder_bytes(model),
        rss_floor_slope_per_epoch_after_first=_truth.tail_slope(after, skip_frac=0.0),
        rss_floor_rise_first_epoch=(f[1] - f[0]) if len(f) > 1 else 0,
        rss_floor_growth_after_second_epoch=(f[-1] - f[1]) if len(f) > 1 else 0,
        **epoch_floor.summary("epoch"),
    )


if __name__ == "__main__":
    main()
