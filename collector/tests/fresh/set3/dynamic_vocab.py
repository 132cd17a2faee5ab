"""Streaming click-through model with an open vocabulary of hashtag/item ids.

Events arrive as batches of raw categorical ids (hashtags, item ids) drawn from
a stream in which new ids keep appearing (a long-tailed, ever-growing id
space).  ``GrowingEmbedding`` maps every id it has ever seen to a row of its
table: unseen ids get the next free row in ``self.vocab`` (a dict), and when
the table is full it is re-allocated ``GROW_ROWS`` rows larger
(``torch.cat`` of the old table and freshly initialised rows, re-wrapped as the
Parameter ``self.table``).  Training uses sparse gradients and plain SGD.

Correct diagnosis: resident memory grows linearly with training steps, by the
rows added for the new ids of each step (``table_bytes_per_step``, 512 bytes a
row) plus their ``self.vocab`` entries, without bound, because the vocabulary
is never capped or pruned.  The memory is held by the embedding table
``self.table`` of the GrowingEmbedding module (and its id dict
``self.vocab``).  Fix: bound the vocabulary - hash ids into a fixed number of
buckets (the hashing trick), or admit an id only after a minimum count and
evict rare/stale ids.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "rss_floor_slope_per_step",
    "rate_tolerance": 0.33,
    "holder": "self.table",
    "memory_kind": "tensors",
    "advice": "Cap the vocabulary: hash ids into a fixed number of embedding rows (or admit ids only above a minimum count and evict stale ones) instead of adding a row for every new id.",
    "findings": ["leak"],
    "absent": ["model-copies", "reference-cycles", "optimizer-state-heavy"],
    "words": ["table"],
    "no_words": [],
    "holder_bytes_key": "table_bytes",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

STEPS = _truth.pick(500, 30)
BATCH = 4096
IDS_PER_EVENT = 4
DIM = 128
GROW_ROWS = 8192
NEW_ID_FRACTION = 0.04     # share of id occurrences that are never-seen ids


class GrowingEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.vocab = {}
        self.table = nn.Parameter(torch.randn(GROW_ROWS, dim) * 0.01)
        self.grows = 0

    def lookup(self, raw_ids):
        rows = np.empty(len(raw_ids), dtype=np.int64)
        vocab = self.vocab
        for i, rid in enumerate(raw_ids.tolist()):
            r = vocab.get(rid)
            if r is None:
                r = len(vocab)
                vocab[rid] = r
            rows[i] = r
        needed = len(vocab)
        if needed > self.table.shape[0]:
            extra = ((needed - self.table.shape[0]) // GROW_ROWS + 1) * GROW_ROWS
            fresh = torch.randn(extra, self.dim) * 0.01
            self.table = nn.Parameter(torch.cat([self.table.detach(), fresh]))
            self.grows += 1
        return torch.from_numpy(rows)

    def forward(self, raw_ids):
        rows = self.lookup(raw_ids.reshape(-1))
        return F.embedding(rows, self.table, sparse=True).view(*raw_ids.shape, self.dim)


class CTRModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = GrowingEmbedding(DIM)
        self.mlp = nn.Sequential(nn.Linear(IDS_PER_EVENT * DIM, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, raw_ids):
        e = self.emb(raw_ids)
        return self.mlp(e.flatten(1)).squeeze(1)


class IdStream:
    """Long-tailed id stream: mostly popular ids, a steady share of brand-new ones."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.next_new = 10_000_000

    def batch(self):
        n = BATCH * IDS_PER_EVENT
        ids = self.rng.zipf(1.3, n) % 20_000
        new = self.rng.random(n) < NEW_ID_FRACTION
        k = int(new.sum())
        ids[new] = np.arange(self.next_new, self.next_new + k)
        self.next_new += k
        clicks = (ids.reshape(BATCH, IDS_PER_EVENT) % 7 == 0).any(1)
        return ids.reshape(BATCH, IDS_PER_EVENT), torch.from_numpy(clicks.astype(np.float32))


def make_opt(model):
    return torch.optim.SGD([
        {"params": [model.emb.table], "lr": 0.05},
        {"params": model.mlp.parameters(), "lr": 0.05},
    ])


def main():
    stream = IdStream(1)
    model = CTRModel()
    opt = make_opt(model)
    floor = _truth.Floor()
    table_rows = []
    for step in range(STEPS):
        ids, y = stream.batch()
        table_before = model.emb.table
        logits = model(ids)
        if model.emb.table is not table_before:
            opt = make_opt(model)        # SGD has no state, rebuilding is harmless
        loss = F.binary_cross_entropy_with_logits(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del table_before
        floor.end_unit()
        table_rows.append(len(model.emb.vocab))
        if step % 50 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}  vocab {len(model.emb.vocab):8d}  "
                  f"table rows {model.emb.table.shape[0]:8d}  "
                  f"rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    rows_per_step = _truth.tail_slope(table_rows, 0.1)
    _truth.write(
        steps=STEPS,
        vocab_size=len(model.emb.vocab),
        table_rows=model.emb.table.shape[0],
        table_bytes=_truth.storage_bytes([model.emb.table]),
        table_grows=model.emb.grows,
        new_ids_per_step=rows_per_step,
        table_bytes_per_step=rows_per_step * DIM * 4,
        rss_floor_slope_per_step=floor.rate(skip_frac=0.1),
        rss_floor_growth=floor.floors[-1] - floor.floors[0],
        **floor.summary("step"),
    )


if __name__ == "__main__":
    main()
