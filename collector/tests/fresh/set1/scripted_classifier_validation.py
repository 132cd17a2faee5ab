"""TorchScript text classifier whose validation pass forgets torch.no_grad().

A fastText-style classifier (token embedding -> GELU -> LayerNorm -> mean pool
-> MLP head) is compiled with `torch.jit.script` so the same artefact can be
shipped to the serving team, and trained with Adam on synthetic token
sequences (batch 256 x 128 tokens, dim 256). After each of the 4 epochs,
`validate()` runs the scripted model over 8 validation batches and collects
the logits in a list, `outputs`, to compute accuracy over the whole split. It
does not use torch.no_grad(), so every output carries its autograd graph and
the graph keeps the batch's saved activations (the embedding output and the
GELU output, 32 MiB each, ~64 MiB per batch) alive while `outputs` holds it.
Memory therefore climbs by ~64 MiB per validation batch to a peak ~0.5 GiB
above the training floor, far above a training step's peak, and drops back
when validate() returns and `outputs` is released: a transient peak repeated
every epoch, not a leak. A correct diagnosis says evaluation needs more memory
than training because the eval outputs keep their autograd graphs (saved
activations), and advises running validation under torch.no_grad() /
torch.inference_mode() (or storing `logits.detach()`).

EXPECT = {
    "symptom": "transient_peak",
    "unit": "iteration",
    "rate_key": "eval_growth_per_batch",
    "rate_tolerance": 0.33,
    "holder": "outputs",
    "memory_kind": "tensors",
    "advice": "wrap validation in torch.no_grad() or torch.inference_mode()",
    "findings": ["eval-peak"],
    "absent": ["leak", "eval-retains-memory", "reference-cycles", "worker-private-growth"],
    "words": [],
    "no_words": ["DataLoader"],
    "peak_key": "eval_peak_rss",
}
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
VOCAB, DIM, SEQ, CLASSES, BATCH = 20_000, 256, 128, 4, 256
EPOCHS, TRAIN_STEPS, VAL_BATCHES = 4, 30, 8


class FastTextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, CLASSES))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.emb(tokens)))
        return self.head(h.mean(1))


def make_batch(gen):
    y = torch.randint(0, CLASSES, (BATCH,), generator=gen)
    # each class draws 30% of its tokens from its own slice of the vocabulary
    own = torch.randint(0, VOCAB // CLASSES, (BATCH, SEQ), generator=gen) + (y * (VOCAB // CLASSES))[:, None]
    noise = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    pick = torch.rand(BATCH, SEQ, generator=gen) < 0.3
    return torch.where(pick, own, noise), y


model = torch.jit.script(FastTextClassifier())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train_gen = torch.Generator().manual_seed(1)
val_set = [make_batch(torch.Generator().manual_seed(100 + i)) for i in range(VAL_BATCHES)]
trace = {"train_peak": 0, "eval": []}


def validate():
    model.eval()
    outputs, targets = [], []
    rss_before = _truth.rss_bytes()
    for x, y in val_set:
        outputs.append(model(x))
        targets.append(y)
        trace["eval"].append(_truth.rss_bytes())
    acc = (torch.cat(outputs).argmax(1) == torch.cat(targets)).float().mean().item()
    model.train()
    return acc, rss_before, trace["eval"][-1]


rss_start = _truth.rss_bytes()
epochs = []
for epoch in range(EPOCHS):
    for _ in range(TRAIN_STEPS):
        x, y = make_batch(train_gen)
        logits = model(x)
        trace["train_peak"] = max(trace["train_peak"], _truth.rss_bytes())
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    acc, before, after_last = validate()
    epochs.append({"rss_before_eval": before, "rss_last_eval_batch": after_last,
                   "rss_after_eval": _truth.rss_bytes(), "val_acc": acc})
    print(f"epoch {epoch} loss {loss.item():.3f} val_acc {acc:.3f}")

growth = [(e["rss_last_eval_batch"] - e["rss_before_eval"]) / VAL_BATCHES for e in epochs]
_truth.write(
    unit="eval_batch",
    optimizer_steps=EPOCHS * TRAIN_STEPS,
    eval_batches=EPOCHS * VAL_BATCHES,
    epochs=epochs,
    rss_start=rss_start,
    train_peak_rss=trace["train_peak"],
    eval_peak_rss=max(trace["eval"]),
    eval_peak_above_train_peak=max(trace["eval"]) - trace["train_peak"],
    eval_growth_per_batch=sum(growth) / len(growth),
    left_after_eval=[e["rss_after_eval"] - e["rss_before_eval"] for e in epochs],
    activation_bytes_per_val_batch=2 * BATCH * SEQ * DIM * 4,
)
