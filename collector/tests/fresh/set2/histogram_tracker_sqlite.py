"""Train a residual MLP on synthetic regression data while a small home-made
experiment tracker "watches" the model: every step it logs a histogram of
every parameter and every gradient (the ``wandb.watch(log="all")`` /
``add_histogram`` habit) into a SQLite database.  The tracker opens the
database in memory (``sqlite3.connect(":memory:")``) "because writing to disk
every step was slow", and backs it up to a file once at the end.

What a correct memory diagnosis says: resident memory grows linearly with
training steps (about 200 KB per step) for the whole run, while tensor memory
and the number of Python objects stay flat.  The growth is native memory
owned by SQLite: ``tracker.db`` is an in-memory database, so every inserted
histogram row (2 per parameter tensor per step, a 2 KB blob that fills
a 4 KB page) lives in
SQLite's heap until the process ends.  Fix: open the database on disk (its
page cache is then bounded) and/or log histograms every N steps instead of
every step.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "rate_bytes_per_step",
    "rate_tolerance": 0.33,
    "holder": "tracker.db",
    "memory_kind": "native",
    "advice": "Write the tracker's SQLite database to a file instead of :memory: (or log histograms every N steps).",
    "findings": ["leak"],
    "absent": ["reference-cycles", "eval-retains-memory", "optimizer-state-heavy", "model-copies", "worker-private-growth", "activations-dominate", "non-finite-gradients"],
    "words": ["sqlite"],
    "no_words": ["DataLoader", "reference cycle"],
    "holder_bytes_key": "sqlite_memory_used_bytes",
    "flat_rate_key": "tensor_rate_bytes_per_step",
}
"""
import gc
import os
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
DIM, BLOCKS, BINS = 256, 3, 512


class ResidualMLP(nn.Module):
    def __init__(self, d_in=64):
        super().__init__()
        self.inp = nn.Linear(d_in, DIM)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, DIM), nn.GELU(), nn.Linear(DIM, DIM))
            for _ in range(BLOCKS))
        self.out = nn.Linear(DIM, 1)

    def forward(self, x):
        h = self.inp(x)
        for blk in self.blocks:
            h = h + blk(h)
        return self.out(h).squeeze(-1)


class Tracker:
    """Minimal experiment tracker: scalars and histograms in SQLite."""

    def __init__(self, run_name):
        self.run_name = run_name
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE scalars (step INT, key TEXT, value REAL)")
        self.db.execute("CREATE TABLE histograms (step INT, key TEXT, lo REAL, hi REAL, counts BLOB)")

    def log_scalar(self, step, key, value):
        self.db.execute("INSERT INTO scalars VALUES (?, ?, ?)", (step, key, float(value)))

    def log_histogram(self, step, key, tensor, bins=BINS):
        t = tensor.detach().float()
        lo, hi = t.min().item(), t.max().item()
        counts = torch.histc(t, bins=bins, min=lo, max=hi if hi > lo else lo + 1e-6)
        self.db.execute("INSERT INTO histograms VALUES (?, ?, ?, ?, ?)",
                        (step, key, lo, hi, counts.to(torch.int32).numpy().tobytes()))

    def watch(self, step, model):
        for name, p in model.named_parameters():
            self.log_histogram(step, f"weights/{name}", p)
            if p.grad is not None:
                self.log_histogram(step, f"gradients/{name}", p.grad)

    def commit(self):
        self.db.commit()

    def save(self, path):
        with sqlite3.connect(path) as disk:
            self.db.backup(disk)


def batches(n, batch_size=256, d_in=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d_in, generator=g)
    for _ in range(n):
        x = torch.randn(batch_size, d_in, generator=g)
        y = torch.sin(x @ w / 4) + 0.1 * torch.randn(batch_size, generator=g)
        yield x, y


def main(n_steps=1300):
    model = ResidualMLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tracker = Tracker("resmlp-baseline")
    steps, rss, tensor_steps, tensor_bytes, n_objects = [], [], [], [], []
    for step, (x, y) in enumerate(batches(n_steps)):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tracker.log_scalar(step, "train/loss", loss.item())
        tracker.watch(step, model)
        if step % 50 == 0:
            tracker.commit()
        if step % 20 == 0:
            steps.append(step)
            rss.append(_truth.rss())
        if step % 200 == 0:
            tensor_steps.append(step)
            tensor_bytes.append(_truth.storage_bytes(_truth.walk_tensors([model, opt])))
            n_objects.append(len(gc.get_objects()))
            print(f"step {step} loss {loss.item():.4f}")
    tracker.commit()
    rows = tracker.db.execute("SELECT COUNT(*), SUM(LENGTH(counts)) FROM histograms").fetchone()
    page_count = tracker.db.execute("PRAGMA page_count").fetchone()[0]
    page_size = tracker.db.execute("PRAGMA page_size").fetchone()[0]
    warm = [(s, r) for s, r in zip(steps, rss) if s >= 100]
    path = os.path.join(tempfile.mkdtemp(prefix="tracker_"), "run.sqlite")
    tracker.save(path)
    _truth.write(
        n_steps=n_steps,
        rate_bytes_per_step=_truth.slope(*zip(*warm)),
        growth_bytes=warm[-1][1] - warm[0][1],
        histogram_rows=rows[0],
        histogram_blob_bytes=rows[1],
        sqlite_memory_used_bytes=page_count * page_size,
        sqlite_db_file_bytes=os.path.getsize(path),
        tensor_bytes_growth=tensor_bytes[-1] - tensor_bytes[1],
        tensor_rate_bytes_per_step=_truth.slope(tensor_steps[1:], tensor_bytes[1:]),
        python_objects_growth=n_objects[-1] - n_objects[1],
        rss_series=[[s, r] for s, r in zip(steps[::5], rss[::5])],
    )
    os.remove(path)
    os.rmdir(os.path.dirname(path))


if __name__ == "__main__":
    main()
