"""Sequence classifier trained with gradient accumulation, written carefully.

A 2-layer Transformer encoder classifies synthetic token sequences. Batches
come from a DataLoader over a TensorDataset (no worker processes); each
optimizer step accumulates 4 micro-batches (`(loss / ACCUM).backward()` per
micro-batch, so each micro-batch's activations are freed right after its
backward), clips the gradient norm, steps AdamW and a cosine LR schedule, and
zeroes gradients with set_to_none. Logging keeps only Python floats
(`loss.item()`), and a validation pass under torch.no_grad() runs every 40
steps. Memory rises once, during the first optimizer step (AdamW creates its
two moment buffers, gradients appear), and is flat from then on: nothing is
kept from one step to the next except the model, its gradients and the
optimizer state (~2.5 MiB of parameters, x4 with grads and moments). A correct
diagnosis says there is nothing to change: no growth, no leak, validation does
not keep memory and does not need more than training.

EXPECT = {
    "symptom": "none",
    "unit": "step",
    "rate_key": "growth_per_step",
    "rate_tolerance": 0.33,
    "holder": None,
    "memory_kind": None,
    "advice": None,
    "findings": [],
    "absent": ["leak", "reference-cycles", "eval-retains-memory", "eval-peak",
               "worker-private-growth", "host-memory-pressure"],
    "words": [],
    "no_words": [],
}
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import _truth

torch.manual_seed(0)
VOCAB, SEQ, DIM, CLASSES = 2_000, 48, 128, 5
MICRO_BATCH, ACCUM, STEPS = 16, 4, 120


def synthetic_split(n):
    x = torch.randint(0, VOCAB, (n, SEQ))
    y = torch.bucketize(x.float().mean(1), torch.tensor([960.0, 990.0, 1010.0, 1040.0]))
    return TensorDataset(x, y)


class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        layer = nn.TransformerEncoderLayer(DIM, nhead=4, dim_feedforward=4 * DIM,
                                           batch_first=True, dropout=0.1)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        h = self.encoder(self.tok(x) + self.pos)
        return self.head(h.mean(1))


train_loader = DataLoader(synthetic_split(MICRO_BATCH * ACCUM * STEPS), batch_size=MICRO_BATCH,
                          shuffle=True, drop_last=True)
val_loader = DataLoader(synthetic_split(512), batch_size=MICRO_BATCH)

model = EncoderClassifier()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / STEPS)))


def evaluate():
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total


rss_start = _truth.rss_bytes()
rss_by_step = {}
running, step = 0.0, 0
for i, (x, y) in enumerate(train_loader):
    loss = F.cross_entropy(model(x), y)
    (loss / ACCUM).backward()
    running += loss.item() / ACCUM
    if (i + 1) % ACCUM:
        continue
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    step += 1
    rss_by_step[step] = _truth.rss_bytes()
    if step % 40 == 0:
        print(f"step {step} loss {running:.3f} val_acc {evaluate():.3f}")
    running = 0.0

param_bytes = _truth.storage_bytes(model.parameters())
state_bytes = _truth.storage_bytes(t for s in optimizer.state.values() for t in s.values()
                                   if torch.is_tensor(t) and t.dim() > 0)
_truth.write(
    unit="optimizer_step",
    optimizer_steps=step,
    micro_batches=step * ACCUM,
    param_bytes=param_bytes,
    optimizer_state_bytes=state_bytes,
    rss_start=rss_start,
    rss_step_1=rss_by_step[1],
    rss_step_10=rss_by_step[10],
    rss_end=_truth.rss_bytes(),
    rss_every_20_steps=[rss_by_step[s] for s in range(20, step + 1, 20)],
    growth_per_step=(rss_by_step[step] - rss_by_step[10]) / (step - 10),
)
