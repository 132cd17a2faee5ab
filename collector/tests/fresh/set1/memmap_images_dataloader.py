"""Image classifier fed from a memory-mapped uint8 file by DataLoader workers.

The script first writes a preprocessed dataset to disk, the way a prepare step
would: 40 000 images of 3x64x64 uint8 in one flat binary file (~470 MiB),
labels in a small tensor. Training then reads it through a map-style Dataset
that opens `np.memmap` lazily in each worker (`self.images`), with
DataLoader(num_workers=2, shuffle=True, persistent_workers=True), for 4 epochs
of a small CNN. Each worker's RSS climbs as it touches new parts of the file:
every image it reads maps pages of the page cache into it (the kernel maps 64
KiB around each faulting page, so reading a random half of the images maps
nearly all of the file). Measured: within the first ~20 steps each worker's
file-backed RSS rises to the whole file, ~470 MiB per worker (the workers' RSS
sum rises by ~2 x 470 MiB); the workers' private heap then grows by ~120 MiB
in total until epoch 2 (collate buffers), and from epoch 2 on everything is
flat: bounded, not a leak. These are clean, file-backed pages shared by both
workers (the tree's PSS counts them once) and the kernel can drop them under
pressure; the workers' private dirty memory stays small. A correct diagnosis
says the growth is file pages of the memory-mapped dataset (`self.images`),
bounded by the file size, and that nothing needs to change (a naive sum of
worker RSS double-counts it).

EXPECT = {
    "symptom": "bounded",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "self.images",
    "memory_kind": "file_pages",
    "advice": None,
    "findings": [],
    "absent": ["leak", "worker-private-growth", "host-memory-pressure", "shm-pressure",
               "reference-cycles"],
    "words": [],
    "no_words": ["copy-on-write"],
    "bound_key": "file_bytes",
}
"""
import os
import shutil
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import _truth

N_IMAGES, SHAPE, CLASSES, EPOCHS = 40_000, (3, 64, 64), 10, 4


def prepare(path, n, seed=0):
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(CLASSES, *SHAPE), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size=n)
    with open(path, "wb") as f:
        for start in range(0, n, 2_000):
            y = labels[start:start + 2_000]
            noise = rng.integers(0, 128, size=(len(y), *SHAPE), dtype=np.uint8)
            f.write((templates[y] // 2 + noise).tobytes())
    return torch.from_numpy(labels)


class MemmapImages(Dataset):
    def __init__(self, path, labels):
        self.path, self.labels = path, labels
        self.images = None  # opened in each worker

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if self.images is None:
            self.images = np.memmap(self.path, dtype=np.uint8, mode="r",
                                    shape=(len(self.labels), *SHAPE))
        x = torch.from_numpy(np.array(self.images[i])).float().div_(255.0)
        return x, self.labels[i]


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 4, stride=4)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, CLASSES)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


def worker_memory():
    rows = [_truth.smaps_rollup(pid) for pid in _truth.children()]
    keys = ("Rss", "Pss", "Pss_File", "Private_Dirty", "Shared_Clean", "Private_Clean")
    return {k: sum(r.get(k, 0) for r in rows) for k in keys} | {"workers": len(rows)}


if __name__ == "__main__":
    torch.manual_seed(0)
    workdir = tempfile.mkdtemp(prefix="memmap_images_")
    path = os.path.join(workdir, "train_u8.bin")
    labels = prepare(path, N_IMAGES)
    dataset = MemmapImages(path, labels)
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=2,
                        persistent_workers=True)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    rss_start, per_epoch, first_epoch, step = _truth.rss_bytes(), [], [], 0
    for epoch in range(EPOCHS):
        correct = 0
        for x, y in loader:
            out = model(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += (out.argmax(1) == y).sum().item()
            step += 1
            if epoch == 0 and step % 20 == 0:
                first_epoch.append((step, worker_memory()["Rss"]))
        mem = worker_memory() | {"epoch": epoch + 1, "step": step,
                                 "main_rss": _truth.rss_bytes(),
                                 "tree_pss": _truth.tree_pss_bytes()}
        per_epoch.append(mem)
        print(f"epoch {epoch + 1} acc {correct / len(dataset):.3f} "
              f"workers RSS {mem['Rss'] / 2**20:.0f} MiB PSS {mem['Pss'] / 2**20:.0f} MiB")

    file_bytes = os.path.getsize(path)
    del loader
    shutil.rmtree(workdir)
    _truth.write(
        unit="optimizer_step",
        optimizer_steps=step,
        epochs=EPOCHS,
        file_bytes=file_bytes,
        rss_start=rss_start,
        per_epoch=per_epoch,
        worker_rss_every_20_steps_epoch1=first_epoch,
        worker_rss_growth_per_step_epoch1=(first_epoch[-1][1] - first_epoch[0][1])
        / (first_epoch[-1][0] - first_epoch[0][0]),
        worker_rss_growth_per_epoch=[b["Rss"] - a["Rss"] for a, b in zip(per_epoch, per_epoch[1:])],
        worker_private_dirty_end=per_epoch[-1]["Private_Dirty"],
        worker_pss_file_end=per_epoch[-1]["Pss_File"],
    )
