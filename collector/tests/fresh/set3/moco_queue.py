"""MoCo-style self-supervised pretraining with a fixed-size queue of negatives.

A query encoder and a momentum ("key") encoder embed two augmented views of
synthetic images.  The keys of every batch are written into a ring buffer of
negatives, ``self.queue`` (a registered module buffer of QUEUE_LEN x DIM
floats, allocated once in ``__init__``), overwriting the oldest entries.  The
contrastive logits against the whole queue (and the queue snapshot taken with
``clone().detach()``, as in the reference implementation) are per-step
temporaries of about a MiB that are freed every step.

Correct diagnosis: nothing is wrong.  After the first few steps the resident
memory is flat for the whole run; the queue is a fixed-size buffer that is
preallocated and reused in place (enqueue overwrites, it never grows), the
momentum encoder is a deliberate second encoder of the method, and the per-step
logits are freed each step.  No change is needed; in particular the queue does
not need to be shrunk, cleared or bounded - it already is.

EXPECT = {
    "symptom": "none",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "self.queue",
    "memory_kind": "tensors",
    "advice": None,
    "findings": [],
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "words": [],
    "no_words": ["grows without bound", "unbounded growth"],
    "holder_bytes_key": "queue_bytes",
    "flat_rate_key": "rss_floor_slope_per_step",
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

STEPS = _truth.pick(400, 20)
BATCH = 64
DIM = 128
QUEUE_LEN = 4096              # as in the MoCo CIFAR-10 demo
MOMENTUM = 0.99
TEMP = 0.2


def make_encoder():
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(3 * 32 * 32, 1024), nn.ReLU(),
        nn.Linear(1024, 512), nn.ReLU(),
        nn.Linear(512, DIM),
    )


class MoCo(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder_q = make_encoder()
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(DIM, QUEUE_LEN), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def momentum_update(self):
        for pq, pk in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            pk.mul_(MOMENTUM).add_(pq.detach(), alpha=1 - MOMENTUM)

    @torch.no_grad()
    def enqueue(self, keys):
        ptr = int(self.queue_ptr)
        n = keys.shape[0]
        self.queue[:, ptr:ptr + n] = keys.T
        self.queue_ptr[0] = (ptr + n) % QUEUE_LEN

    def forward(self, xq, xk):
        q = F.normalize(self.encoder_q(xq), dim=1)
        with torch.no_grad():
            self.momentum_update()
            k = F.normalize(self.encoder_k(xk), dim=1)
        l_pos = (q * k).sum(1, keepdim=True)
        l_neg = q @ self.queue.clone().detach()
        logits = torch.cat([l_pos, l_neg], dim=1) / TEMP
        labels = torch.zeros(q.shape[0], dtype=torch.long)
        loss = F.cross_entropy(logits, labels)
        self.enqueue(k)
        return loss


def augment(x, g):
    noise = torch.randn(x.shape, generator=g) * 0.1
    mask = (torch.rand(x.shape[0], 1, 32, 32, generator=g) > 0.2).float()
    return (x + noise) * mask


def main():
    g = torch.Generator().manual_seed(1)
    images = torch.rand(4096, 3, 32, 32, generator=g)
    model = MoCo()
    opt = torch.optim.SGD(model.encoder_q.parameters(), lr=0.03, momentum=0.9,
                          weight_decay=1e-4)
    floor = _truth.Floor()
    for step in range(STEPS):
        idx = torch.randint(0, images.shape[0], (BATCH,), generator=g)
        x = images[idx]
        loss = model(augment(x, g), augment(x, g))
        opt.zero_grad(set_to_none=False)   # keep the grad buffers allocated
        loss.backward()
        opt.step()
        del loss
        floor.end_unit()
        if step % 50 == 0:
            print(f"step {step:4d}  rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    queue_bytes = _truth.storage_bytes([model.queue])
    _truth.write(
        steps=STEPS,
        queue_bytes=queue_bytes,
        rss_floor_slope_per_step=floor.rate(skip_frac=0.2),
        rss_floor_growth_after_warmup=floor.floors[-1] - floor.floors[len(floor.floors) // 5],
        **floor.summary("step"),
    )


if __name__ == "__main__":
    main()
