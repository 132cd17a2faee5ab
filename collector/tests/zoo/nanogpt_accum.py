"""A nanoGPT-style loop: a 2-layer causal transformer on random tokens, AdamW with weight-decay
groups, gradient accumulation of 4 micro-batches, clipping, a cosine learning rate set by hand
on each param group, and an `estimate_loss()` under `torch.no_grad()` every 25 iterations that
keeps floats. Nothing grows; 3 evals.

EXPECT = {
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["after the last mark", "has no step marks"],
    "evals": 3,
}
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d=128, heads=4, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=75)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    vocab, seq, accum = 512, 64, 4
    data = torch.randint(0, vocab, (50_000,))

    def batch():
        i = torch.randint(0, len(data) - seq - 1, (8,))
        return torch.stack([data[j:j + seq] for j in i]), torch.stack([data[j + 1:j + seq + 1]
                                                                       for j in i])

    model = GPT(vocab, seq)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=6e-4)

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = sum(model(*batch()).item() for _ in range(4)) / 4
        model.train()
        return out

    history, evals = [], 0
    for it in range(1, a.iters + 1):
        lr = 6e-4 * 0.5 * (1 + math.cos(math.pi * it / a.iters))
        for g in opt.param_groups:
            g["lr"] = lr
        for _ in range(accum):
            loss = model(*batch()) / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if it % 25 == 0:
            history.append(estimate_loss())
            evals += 1
    _truth.write(steps=a.iters, evals=evals)
    print("val %.3f" % history[-1])


if __name__ == "__main__":
    main()
