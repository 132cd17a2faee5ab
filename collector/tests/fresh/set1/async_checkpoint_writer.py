"""Training with a background checkpoint-writer thread whose consumer has died.

A text classifier (EmbeddingBag over a 50 000-word vocabulary, 38 MB, plus an
MLP) trains for 400 Adam steps. To keep disk I/O off the training loop,
`AsyncCheckpointer` runs a writer thread: every 20 steps the loop calls
`ckpt.submit()`, which clones the state dict and puts it on `ckpt.queue`, an
unbounded queue.Queue; the thread torch.saves each snapshot and updates a
`latest.json`. The metrics passed along contain the loss tensor rather than
`loss.item()`, so the very first json.dump raises "Object of type Tensor is
not JSON serializable" and the writer thread dies (a traceback on stderr, the
program goes on and exits 0). From then on nothing consumes the queue: every
20 steps another ~38.6 MB snapshot is added and kept, so memory rises in
regular stairs of that size, ~1.9 MB per optimizer step on average, linearly
and without bound (19 snapshots, ~730 MB, by the end). A correct diagnosis
reports linear growth held by the checkpoint queue (`ckpt.queue`, cloned
state-dict tensors) and advises fixing the dead writer thread (pass
`loss.item()`) and bounding the queue (`queue.Queue(maxsize=...)`, so a stuck
writer blocks or drops snapshots instead of piling them up).

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "growth_per_step",
    "rate_tolerance": 0.33,
    "holder": "ckpt.queue",
    "memory_kind": "tensors",
    "advice": "fix the writer thread and give the queue a maxsize",
    "findings": ["leak"],
    "absent": ["reference-cycles", "worker-private-growth", "eval-retains-memory"],
    "words": ["queue"],
    "no_words": ["DataLoader"],
    "holder_bytes_key": "queued_bytes",
}
"""
import json
import os
import queue
import shutil
import tempfile
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
VOCAB, DIM, CLASSES, BATCH, STEPS, EVERY = 50_000, 192, 20, 128, 400, 20


class AsyncCheckpointer:
    def __init__(self, directory):
        self.directory = directory
        self.queue = queue.Queue()
        self.written = 0
        self.thread = threading.Thread(target=self._run, name="ckpt-writer", daemon=True)
        self.thread.start()

    def submit(self, step, model, metrics):
        snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.queue.put((step, snapshot, metrics))

    def _run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            step, state, metrics = item
            path = os.path.join(self.directory, f"step_{step:06d}.pt")
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
            self.written += 1
            with open(os.path.join(self.directory, "latest.json"), "w") as f:
                json.dump({"step": step, "path": path, **metrics}, f)
            self.queue.task_done()

    def close(self):
        self.queue.put(None)
        self.thread.join()


class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, DIM, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(DIM, 256), nn.ReLU(), nn.Linear(256, CLASSES))

    def forward(self, tokens):
        return self.mlp(self.emb(tokens))


def make_batch():
    y = torch.randint(0, CLASSES, (BATCH,))
    topical = torch.randint(0, 500, (BATCH, 48)) + (y * 2_500)[:, None]
    tokens = torch.where(torch.rand(BATCH, 48) < 0.4, topical, torch.randint(0, VOCAB, (BATCH, 48)))
    return tokens, y


workdir = tempfile.mkdtemp(prefix="ckpt_")
model = BagOfWords()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
ckpt = AsyncCheckpointer(workdir)

rss_start, rss = _truth.rss_bytes(), {}
for step in range(1, STEPS + 1):
    x, y = make_batch()
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % EVERY == 0:
        ckpt.submit(step, model, {"loss": loss.detach()})
    rss[step] = _truth.rss_bytes()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.3f} pending checkpoints {ckpt.queue.qsize()}")

writer_alive = ckpt.thread.is_alive()
pending = list(ckpt.queue.queue)
queued_bytes = _truth.storage_bytes(t for _, state, _ in pending for t in state.values())
ckpt.close()
shutil.rmtree(workdir)
_truth.write(
    unit="optimizer_step",
    optimizer_steps=STEPS,
    snapshots_submitted=STEPS // EVERY,
    checkpoints_written=ckpt.written,
    writer_alive_at_end=writer_alive,
    queued_snapshots=len(pending),
    queued_bytes=queued_bytes,
    snapshot_bytes=queued_bytes / len(pending),
    rss_start=rss_start,
    rss_step_40=rss[2 * EVERY],
    rss_end=_truth.rss_bytes(),
    rss_every_40_steps=[rss[s] for s in range(40, STEPS + 1, 40)],
    growth_per_step=(rss[STEPS] - rss[2 * EVERY]) / (STEPS - 2 * EVERY),
)
