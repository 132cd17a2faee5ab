"""Fine-tune a small transformer text classifier with AdamW, bf16 autocast,
gradient clipping, a warm-up/cosine LR schedule, an EMA of the weights that
is used for validation, and a checkpoint written at the end of every epoch.

What a correct memory diagnosis says: nothing is wrong.  Memory rises once
during the first training step (~75 MB here: the gradients and AdamW's two
moment buffers ``exp_avg``/``exp_avg_sq``, created lazily, 3x the parameter
bytes together, plus the allocator's working set for activations), and the
EMA copy made at start-up adds one more parameter-sized block; after that
first step resident memory is flat for the whole run:
per-step activations are freed every step, validation runs under
``torch.no_grad()``, losses are logged with ``.item()`` and checkpoints go
straight to disk.  There is nothing to change.

EXPECT = {
    "symptom": "none",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": None,
    "memory_kind": None,
    "advice": None,
    "findings": [],
    "absent": ["leak", "eval-retains-memory", "reference-cycles", "non-finite-gradients", "non-finite-tensors", "host-memory-pressure", "impossible-request"],
    "words": [],
    "no_words": ["DataLoader"],
    "flat_rate_key": "rate_after_warmup_bytes_per_step",
    "holder_bytes_key": "optimizer_state_bytes",
}
"""
import copy
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
VOCAB, DIM, LAYERS, CLASSES, SEQ = 20_000, 128, 2, 6, 48


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, DIM))
        layer = nn.TransformerEncoderLayer(DIM, 4, 4 * DIM, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, ids, pad_mask):
        h = self.tok(ids) + self.pos[:, : ids.shape[1]]
        h = self.encoder(h, src_key_padding_mask=pad_mask)
        h = self.norm(h).masked_fill(pad_mask.unsqueeze(-1), 0)
        return self.head(h.sum(1) / (~pad_mask).sum(1, keepdim=True))


class ModelEma:
    """Exponential moving average of weights (timm style)."""

    def __init__(self, model, decay=0.999):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for e, m in zip(self.module.state_dict().values(), model.state_dict().values()):
            if e.dtype.is_floating_point:
                e.mul_(self.decay).add_(m.detach(), alpha=1 - self.decay)


def synthetic_batches(n_batches, batch_size, seed):
    """Token sequences whose class is decided by which 'keyword' ids they contain."""
    g = torch.Generator().manual_seed(seed)
    keywords = torch.arange(100, 100 + CLASSES * 20).view(CLASSES, 20)
    for _ in range(n_batches):
        y = torch.randint(0, CLASSES, (batch_size,), generator=g)
        lengths = torch.randint(SEQ // 2, SEQ + 1, (batch_size,), generator=g)
        ids = torch.randint(1000, VOCAB, (batch_size, SEQ), generator=g)
        pos = torch.randint(0, SEQ // 2, (batch_size, 4), generator=g)
        kw = keywords[y][torch.arange(batch_size).unsqueeze(1), torch.randint(0, 20, (batch_size, 4), generator=g)]
        ids.scatter_(1, pos, kw)
        pad_mask = torch.arange(SEQ).unsqueeze(0) >= lengths.unsqueeze(1)
        ids = ids.masked_fill(pad_mask, 0)
        yield ids, pad_mask, y


def lr_at(step, total, warmup, base):
    if step < warmup:
        return base * (step + 1) / warmup
    return 0.5 * base * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def main(epochs=3, steps_per_epoch=150, batch_size=16):
    model = TextClassifier()
    ema = ModelEma(model)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in n else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-4)
    total = epochs * steps_per_epoch
    ckpt_dir = tempfile.mkdtemp(prefix="ft_ckpt_")
    rss_before_first_step = _truth.rss()
    steps, rss = [], []
    step = 0
    best = 0.0
    for epoch in range(epochs):
        model.train()
        running = 0.0
        for ids, pad_mask, y in synthetic_batches(steps_per_epoch, batch_size, seed=epoch):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total, 30, 3e-4)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(ids, pad_mask)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            ema.update(model)
            running += loss.item()
            step += 1
            if step == 1:
                rss_after_first_step = _truth.rss()
            if step % 5 == 0:
                steps.append(step)
                rss.append(_truth.rss())
        # validation on the EMA weights
        correct = seen = 0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            for ids, pad_mask, y in synthetic_batches(20, 32, seed=1000 + epoch):
                correct += (ema.module(ids, pad_mask).argmax(-1) == y).sum().item()
                seen += len(y)
        acc = correct / seen
        torch.save({"model": model.state_dict(), "ema": ema.module.state_dict(),
                    "optimizer": opt.state_dict(), "epoch": epoch},
                   os.path.join(ckpt_dir, "last.pt"))
        best = max(best, acc)
        print(f"epoch {epoch} train loss {running / steps_per_epoch:.3f} ema val acc {acc:.3f}")

    warm = [(s, r) for s, r in zip(steps, rss) if s >= 20]
    settled = [(s, r) for s, r in zip(steps, rss) if s > steps_per_epoch]  # after the 1st eval + save
    param_bytes = _truth.storage_bytes(model.parameters())
    opt_bytes = _truth.storage_bytes(_truth.walk_tensors(opt))
    ckpt_size = os.path.getsize(os.path.join(ckpt_dir, "last.pt"))
    os.remove(os.path.join(ckpt_dir, "last.pt"))
    os.rmdir(ckpt_dir)
    _truth.write(
        param_bytes=param_bytes,
        optimizer_state_bytes=opt_bytes,
        ema_bytes=_truth.storage_bytes(ema.module.state_dict().values()),
        rss_before_first_step_bytes=rss_before_first_step,
        first_step_jump_bytes=rss_after_first_step - rss_before_first_step,
        rate_after_warmup_bytes_per_step=_truth.slope(*zip(*settled)),
        rate_from_step20_bytes_per_step=_truth.slope(*zip(*warm)),
        growth_after_first_epoch_bytes=settled[-1][1] - settled[0][1],
        rss_min_after_warmup_bytes=min(r for _, r in warm),
        rss_max_after_warmup_bytes=max(r for _, r in warm),
        checkpoint_bytes=ckpt_size,
        steps=step,
        best_val_acc=best,
        rss_series=[[s, r] for s, r in zip(steps[::3], rss[::3])],
    )


if __name__ == "__main__":
    main()
