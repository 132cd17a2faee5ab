"""Train a small GPT-style language model on synthetic Markov-chain text and
evaluate perplexity and next-token accuracy every 100 steps.  The evaluation
loop is the common "collect everything, compute metrics at the end" pattern:
it runs under ``torch.no_grad()`` but appends each batch's full-vocabulary
logits to ``all_logits`` and then does ``torch.cat`` + ``cross_entropy`` +
``argmax`` over the whole validation set at once.

What a correct memory diagnosis says: training memory is flat; at every
evaluation memory jumps by several hundred MB (validation tokens x vocabulary
x 4 bytes, held once in ``all_logits``, once more in the concatenated
tensor, and once more in cross_entropy's log-softmax) and drops back as soon
as the evaluation returns: a transient peak at each eval, not a leak, and
nothing is retained after evaluation.  Fix: compute the loss and the number
of correct predictions per batch and accumulate two scalars instead of
keeping the full logits (or evaluate in chunks).

EXPECT = {
    "symptom": "transient_peak",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "all_logits",
    "memory_kind": "tensors",
    "advice": "Accumulate per-batch loss sums and correct counts during evaluation instead of concatenating full-vocabulary logits.",
    "findings": ["eval-peak"],
    "absent": ["leak", "eval-retains-memory", "reference-cycles", "optimizer-state-heavy", "model-copies", "worker-private-growth"],
    "words": ["all_logits"],
    "no_words": ["DataLoader"],
    "peak_key": "eval_peak_bytes",
    "holder_bytes_key": "logits_bytes",
    "flat_rate_key": "train_rate_bytes_per_step",
}
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
VOCAB, DIM, HEADS, LAYERS, SEQ = 8192, 128, 4, 2, 64


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, DIM))
        layer = nn.TransformerEncoderLayer(DIM, HEADS, 4 * DIM, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def forward(self, ids):
        h = self.tok(ids) + self.pos[:, : ids.shape[1]]
        h = self.blocks(h, mask=self.causal[: ids.shape[1], : ids.shape[1]], is_causal=True)
        return self.head(self.ln(h))


class MarkovCorpus:
    """Each token has 4 likely successors: learnable, but with real entropy."""

    def __init__(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.next = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
        self.g = g

    def batch(self, n):
        ids = torch.empty(n, SEQ + 1, dtype=torch.long)
        ids[:, 0] = torch.randint(0, VOCAB, (n,), generator=self.g)
        for t in range(SEQ):
            choice = torch.randint(0, 4, (n,), generator=self.g)
            ids[:, t + 1] = self.next[ids[:, t], choice]
        return ids[:, :-1], ids[:, 1:]


@torch.no_grad()
def evaluate(model, val_batches):
    model.eval()
    all_logits, all_targets = [], []
    for x, y in val_batches:
        all_logits.append(model(x))
        all_targets.append(y)
    logits = torch.cat(all_logits)
    targets = torch.cat(all_targets)
    loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
    acc = (logits.argmax(-1) == targets).float().mean()
    model.train()
    return math.exp(loss.item()), acc.item()


def main(n_steps=300, eval_every=100, batch_size=8, val_seqs=96):
    corpus = MarkovCorpus()
    val_batches = [corpus.batch(16) for _ in range(val_seqs // 16)]
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    steps, rss, evals = [], [], []
    overall_peak = _truth.peak_rss()  # reset_peak() below also resets ru_maxrss
    for step in range(1, n_steps + 1):
        x, y = corpus.batch(batch_size)
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 5 == 0:
            steps.append(step)
            rss.append(_truth.rss())
        if step % eval_every == 0:
            before = _truth.rss()
            _truth.reset_peak()
            ppl, acc = evaluate(model, val_batches)
            peak = _truth.hwm()
            overall_peak = max(overall_peak, peak)
            after = _truth.rss()
            evals.append({"step": step, "rss_before": before, "peak": peak, "rss_after": after,
                          "extra_peak": peak - before, "retained": after - before})
            print(f"step {step}: train loss {loss.item():.3f}  val ppl {ppl:.1f}  acc {acc:.3f}")

    tokens = val_seqs * SEQ
    train = [(s, r) for s, r in zip(steps, rss) if s >= 20 and all(s != e["step"] for e in evals)]
    extra = sorted(e["extra_peak"] for e in evals)
    _truth.write(
        evals=evals,
        eval_steps=[e["step"] for e in evals],
        eval_peak_bytes=extra[len(extra) // 2],
        eval_retained_bytes=max(e["retained"] for e in evals),
        logits_bytes=tokens * VOCAB * 4,
        val_tokens=tokens,
        train_rate_bytes_per_step=_truth.slope(*zip(*train)),
        rss_series=[[s, r] for s, r in zip(steps[::2], rss[::2])],
        peak_rss_bytes=max(overall_peak, _truth.peak_rss()),
    )


if __name__ == "__main__":
    main()
