"""Keyword-spotting training on compressed log-mel spectrograms.  The Dataset
keeps the compressed blobs in a list and, to save the zlib decode on later
epochs, memoises the decoded float32 arrays in ``self._cache`` inside
``__getitem__``.  Loading uses ``DataLoader(num_workers=2,
persistent_workers=True, shuffle=True)``.

What a correct memory diagnosis says: the main process is flat, but the two
DataLoader worker processes' private memory grows epoch after epoch and
levels off: each worker has its own copy of the Dataset, so each builds its
own ``self._cache`` of the samples it happens to load (about half of the
dataset per epoch, at random), approaching a full decoded copy of the
dataset per worker (~2 x 270 MB).  The growth is bounded (it stops when
every sample is cached in every worker) but it multiplies the decoded
dataset by the number of workers, and it lives in child processes, not in
the training process.  Fix: decode once in the main process before the
workers start (shared copy-on-write / shared-memory tensor), or drop the
per-worker cache; persistent workers keep it for the whole run.

EXPECT = {
    "symptom": "bounded",
    "unit": "epoch",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "self._cache",
    "memory_kind": "child_processes",
    "advice": "Decode the dataset once in the main process before starting workers (or drop the per-worker cache) instead of caching inside each DataLoader worker.",
    "findings": ["worker-private-growth"],
    "absent": ["leak", "shm-pressure", "reference-cycles", "optimizer-state-heavy", "model-copies", "eval-retains-memory"],
    "words": ["_cache", "worker"],
    "no_words": ["reference cycle"],
    "bound_key": "children_private_final_bytes",
    "holder_bytes_key": "decoded_dataset_bytes_x_workers",
    "flat_rate_key": "main_rss_rate_bytes_per_epoch",
}
"""
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import _truth

MELS, FRAMES, CROP, KEYWORDS = 64, 256, 192, 12


def synthesize(n, seed=0):
    """Smooth int16-quantised spectrograms with a keyword-specific formant pattern."""
    rng = np.random.default_rng(seed)
    f = np.arange(MELS)[:, None]
    t = np.arange(FRAMES)[None, :]
    blobs, labels = [], []
    for i in range(n):
        k = int(rng.integers(KEYWORDS))
        centre = 8 + 4 * k + 3 * np.sin(t / (10 + k) + rng.uniform(0, 6))
        spec = np.exp(-((f - centre) ** 2) / 18.0) * (1 + 0.3 * np.sin(t / 7.0))
        spec = spec + 0.05 * rng.standard_normal((MELS, FRAMES))
        q = np.clip(spec * 2000, -32000, 32000).astype(np.int16)
        blobs.append(zlib.compress(q.tobytes(), 1))
        labels.append(k)
    return blobs, labels


class CompressedSpectrogramDataset(Dataset):
    def __init__(self, blobs, labels, train=True):
        self.blobs, self.labels, self.train = blobs, labels, train
        self._cache = {}

    def __len__(self):
        return len(self.blobs)

    def _decode(self, idx):
        if idx not in self._cache:
            q = np.frombuffer(zlib.decompress(self.blobs[idx]), dtype=np.int16)
            self._cache[idx] = q.reshape(MELS, FRAMES).astype(np.float32) / 2000.0
        return self._cache[idx]

    def __getitem__(self, idx):
        spec = self._decode(idx)
        start = np.random.randint(0, FRAMES - CROP + 1) if self.train else 0
        x = spec[:, start:start + CROP].copy()
        if self.train:  # SpecAugment-style time mask
            t0 = np.random.randint(0, CROP - 20)
            x[:, t0:t0 + np.random.randint(0, 20)] = 0.0
        return torch.from_numpy(x), self.labels[idx]


class KWSNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(MELS, 96, 5, padding=2), nn.BatchNorm1d(96), nn.ReLU(),
            nn.Conv1d(96, 96, 5, padding=2, stride=2), nn.BatchNorm1d(96), nn.ReLU(),
            nn.Conv1d(96, 128, 3, padding=1, stride=2), nn.BatchNorm1d(128), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(128, KEYWORDS))

    def forward(self, x):
        return self.net(x)


def main(epochs=7, n_samples=4000, workers=2):
    torch.manual_seed(0)
    blobs, labels = synthesize(n_samples)
    ds = CompressedSpectrogramDataset(blobs, labels)
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                        persistent_workers=True, drop_last=True)
    model = KWSNet()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    per_epoch = []
    for epoch in range(epochs):
        correct = seen = 0
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        kids = _truth.children_rollup()
        per_epoch.append({
            "epoch": epoch,
            "children_private": sum(v["private"] for v in kids.values()),
            "children_pss": sum(v["pss"] for v in kids.values()),
            "per_child_private": sorted(v["private"] for v in kids.values()),
            "main_rss": _truth.rss(),
            "tree_pss": _truth.tree_pss(),
        })
        print(f"epoch {epoch}: train acc {correct / seen:.3f}, "
              f"workers private {per_epoch[-1]['children_private'] / 2**20:.0f} MiB")

    decoded = n_samples * MELS * FRAMES * 4
    cp = [e["children_private"] for e in per_epoch]
    growth = [b - a for a, b in zip(cp, cp[1:])]
    _truth.write(
        epochs=epochs,
        workers=workers,
        decoded_dataset_bytes=decoded,
        decoded_dataset_bytes_x_workers=decoded * workers,
        compressed_dataset_bytes=sum(len(b) for b in blobs),
        children_private_first_epoch_bytes=cp[0],
        children_private_final_bytes=cp[-1],
        children_private_growth_per_epoch_bytes=growth,
        last_epoch_growth_fraction=growth[-1] / cp[-1],
        main_rss_rate_bytes_per_epoch=_truth.slope(list(range(1, epochs)), [e["main_rss"] for e in per_epoch[1:]]),
        per_epoch=per_epoch,
    )
    del loader


if __name__ == "__main__":
    main()
