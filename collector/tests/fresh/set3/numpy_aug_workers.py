"""Small CNN trained from a DataLoader whose 2 worker processes do numpy augmentation.

The dataset keeps all images in ONE contiguous uint8 numpy array (built before
the workers fork, so the workers share its pages copy-on-write and never write
to them).  ``__getitem__`` does random crop, horizontal flip, brightness /
contrast jitter and Gaussian noise in numpy, per sample, with a per-worker
seeded Generator, and returns a float tensor.  Workers are persistent across
epochs.

Correct diagnosis: nothing is wrong.  The main process's memory is flat after
the first steps, and each worker's private memory settles at a small constant
(its own Python heap and the per-batch arrays it builds and hands over through
shared memory); it does not grow with steps or epochs.  The image array is
shared, not copied, because it is a single numpy buffer and not a list of
Python objects.  No change is needed (no need to lower num_workers, switch to
memmap files, or move augmentation into the main process).

EXPECT = {
    "symptom": "none",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": None,
    "memory_kind": "child_processes",
    "advice": None,
    "findings": [],
    "absent": ["leak", "worker-private-growth", "shm-pressure", "reference-cycles"],
    "words": [],
    "no_words": ["grows without bound", "unbounded growth"],
    "flat_rate_key": "workers_private_slope_per_step",
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
from torch.utils.data import DataLoader, Dataset  # noqa: E402

torch.manual_seed(0)

N_IMAGES = _truth.pick(6000, 600)
SIZE = 48
CROP = 40
BATCH = 64
EPOCHS = _truth.pick(4, 1)
CLASSES = 10


class AugmentedImages(Dataset):
    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, CLASSES, N_IMAGES).astype(np.int64)
        base = rng.integers(0, 256, (CLASSES, 3, SIZE, SIZE), dtype=np.uint8)
        noise = rng.integers(0, 64, (N_IMAGES, 3, SIZE, SIZE), dtype=np.uint8)
        self.images = (base[self.labels] // 2 + noise).astype(np.uint8)
        self.rng = np.random.default_rng(seed + 1)

    def __len__(self):
        return N_IMAGES

    def __getitem__(self, i):
        img = self.images[i]
        y0, x0 = self.rng.integers(0, SIZE - CROP + 1, 2)
        out = img[:, y0:y0 + CROP, x0:x0 + CROP].astype(np.float32) / 255.0
        if self.rng.random() < 0.5:
            out = out[:, :, ::-1]
        brightness = self.rng.uniform(-0.1, 0.1)
        contrast = self.rng.uniform(0.8, 1.2)
        mean = out.mean(axis=(1, 2), keepdims=True)
        out = (out - mean) * contrast + mean + brightness
        out = out + self.rng.normal(0.0, 0.02, out.shape).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(np.clip(out, 0.0, 1.0))), int(self.labels[i])


def seed_worker(worker_id):
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(1000 + worker_id)


def make_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES),
    )


def main():
    ds = AugmentedImages()
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=2,
                        persistent_workers=True, worker_init_fn=seed_worker,
                        generator=torch.Generator().manual_seed(2), drop_last=True)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    floor = _truth.Floor()
    kid_steps, kid_private, kid_pss = [], [], []
    step = 0
    for epoch in range(EPOCHS):
        correct = total = 0
        for x, y in loader:
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            correct += (out.argmax(1) == y).sum().item()
            total += y.numel()
            floor.end_unit()
            if step % 10 == 0:
                roll = _truth.children_rollup()
                kid_steps.append(step)
                kid_private.append(sum(v["private"] for v in roll.values()))
                kid_pss.append(sum(v["pss"] for v in roll.values()))
            step += 1
        print(f"epoch {epoch}  loss {loss.item():.3f}  acc {correct / max(total, 1):.3f}  "
              f"rss {_truth.rss() / _truth.MiB:7.1f} MiB  "
              f"workers private {kid_private[-1] / _truth.MiB:6.1f} MiB")

    k = len(kid_steps) // 5
    _truth.write(
        steps=step,
        dataset_array_bytes=int(ds.images.nbytes),
        n_workers=2,
        workers_private_first=kid_private[k] if kid_private else 0,
        workers_private_last=kid_private[-1] if kid_private else 0,
        workers_private_max=max(kid_private) if kid_private else 0,
        workers_pss_last=kid_pss[-1] if kid_pss else 0,
        workers_private_slope_per_step=_truth.slope(kid_steps[k:], kid_private[k:]),
        rss_floor_slope_per_step=floor.rate(skip_frac=0.2),
        **floor.summary("step"),
    )


if __name__ == "__main__":
    main()
