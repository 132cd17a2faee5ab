"""Character-level LSTM language model trained with truncated BPTT, tutorial style.

The script walks a long synthetic text stream in chunks of CHUNK characters
(one chunk = one iteration), carrying the LSTM state ``hidden`` from chunk to
chunk.  The author got "Trying to backward through the graph a second time"
and "fixed" it with ``loss.backward(retain_graph=True)`` instead of detaching
the carried state, and updates the weights the old char-RNN-tutorial way
(``p.data.add_(p.grad, alpha=-lr)``), which bypasses autograd's version check,
so nothing ever complains.

Correct diagnosis: resident memory grows linearly with iterations, by about
one chunk's worth of LSTM activations per iteration, without bound (and each
iteration gets slower, since backward re-traverses the whole history).  The
memory is tensors saved by the autograd graph, kept reachable through the
carried state ``hidden`` (its grad_fn chain reaches back to the first chunk)
and kept from being freed by ``retain_graph=True``.  Fix: detach the carried
state at every chunk boundary (``hidden = tuple(h.detach() for h in hidden)``)
and drop ``retain_graph=True``.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "iteration",
    "rate_key": "rss_floor_slope_per_iteration",
    "rate_tolerance": 0.33,
    "holder": "hidden",
    "memory_kind": "tensors",
    "advice": "Detach the carried LSTM state at each chunk boundary (hidden = tuple(h.detach() for h in hidden)) and remove retain_graph=True.",
    "findings": ["leak"],
    "absent": ["model-copies", "reference-cycles", "optimizer-state-heavy"],
    "words": ["retain_graph"],
    "no_words": [],
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

ITERATIONS = _truth.pick(72, 6)
CHUNK = 25
BATCH = 16
VOCAB = 96
EMB = 64
HIDDEN = 256
LR = 0.05


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMB)
        self.lstm = nn.LSTM(EMB, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, hidden):
        out, hidden = self.lstm(self.embed(x), hidden)
        return self.head(out), hidden

    def init_hidden(self):
        return (torch.zeros(1, BATCH, HIDDEN), torch.zeros(1, BATCH, HIDDEN))


def make_stream(n, g):
    """A cheap 'text': a noisy order-2 Markov chain over VOCAB symbols."""
    trans = torch.randint(0, VOCAB, (VOCAB, VOCAB, 3), generator=g)
    s = torch.empty(BATCH, n, dtype=torch.long)
    s[:, :2] = torch.randint(0, VOCAB, (BATCH, 2), generator=g)
    choice = torch.randint(0, 3, (BATCH, n), generator=g)
    noise = torch.rand(BATCH, n, generator=g) < 0.1
    rnd = torch.randint(0, VOCAB, (BATCH, n), generator=g)
    for t in range(2, n):
        nxt = trans[s[:, t - 2], s[:, t - 1], choice[:, t]]
        s[:, t] = torch.where(noise[:, t], rnd[:, t], nxt)
    return s


def graph_nodes(t):
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


def main():
    g = torch.Generator().manual_seed(1)
    text = make_stream(ITERATIONS * CHUNK + 1, g)
    model = CharLM()
    hidden = model.init_hidden()
    floor = _truth.Floor()
    for it in range(ITERATIONS):
        x = text[:, it * CHUNK:(it + 1) * CHUNK]
        y = text[:, it * CHUNK + 1:(it + 1) * CHUNK + 1]
        logits, hidden = model(x, hidden)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        model.zero_grad()
        loss.backward(retain_graph=True)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-LR)
        del logits
        floor.end_unit()
        print(f"iter {it:3d}  loss {loss.item():.4f}  rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    _truth.write(
        iterations=ITERATIONS,
        chunk=CHUNK,
        graph_nodes_at_end=graph_nodes(hidden[0]),
        rss_floor_slope_per_iteration=floor.rate(skip_frac=0.1),
        rss_floor_growth=floor.floors[-1] - floor.floors[0],
        **floor.summary("iteration"),
    )


if __name__ == "__main__":
    main()
