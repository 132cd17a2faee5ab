"""A small intent-classification service: a client thread submits tokenised
utterances through a bounded ``queue.Queue``; the server loop batches up to 16
requests, pads them, and runs a ``torch.compile(dynamic=True)`` model under
``torch.inference_mode()``; each request gets its answer through a
``concurrent.futures.Future`` that the client resolves and drops.

What a correct memory diagnosis says: nothing is wrong.  There is one
warm-up jump at the start while ``torch.compile`` traces and builds the
kernels (inductor imports, generated code, one dynamic-shape graph); after
that, memory is flat per request no matter how many requests are served:
the request queue is bounded, futures are dropped once answered, and batch
tensors are freed after each forward.  Varying input lengths do not change
memory noticeably (the model is small).  There is nothing to change.

EXPECT = {
    "symptom": "none",
    "unit": "request",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": None,
    "memory_kind": None,
    "advice": None,
    "findings": [],
    "absent": ["leak", "reference-cycles", "input-peak", "model-copies", "worker-private-growth", "host-memory-pressure", "eval-retains-memory"],
    "words": [],
    "no_words": ["DataLoader"],
    "flat_rate_key": "rate_after_warmup_bytes_per_request",
}
"""
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn

import _truth

torch.manual_seed(0)
VOCAB, DIM, INTENTS, MAX_BATCH = 8000, 128, 24, 16


class IntentModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.ff = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, INTENTS)

    def forward(self, ids):
        mask = (ids != 0).unsqueeze(-1).to(torch.float32)
        h = self.emb(ids)
        h = self.norm(h + self.ff(h))
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled).softmax(-1)


class Server:
    def __init__(self, model):
        self.model = torch.compile(model.eval(), dynamic=True)
        self.requests = queue.Queue(maxsize=256)
        self.served = 0
        self.batches = 0

    def submit(self, ids):
        fut = Future()
        self.requests.put((ids, fut))
        return fut

    def _collect(self):
        first = self.requests.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + 0.002
        while len(batch) < MAX_BATCH:
            try:
                item = self.requests.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                self.requests.put(None)
                break
            batch.append(item)
        return batch

    def serve_forever(self):
        while True:
            batch = self._collect()
            if batch is None:
                return
            # pad batch to a multiple of 4 rows and length to a multiple of 8
            rows = -(-len(batch) // 4) * 4
            length = -(-max(len(ids) for ids, _ in batch) // 8) * 8
            x = torch.zeros(rows, length, dtype=torch.long)
            for i, (ids, _) in enumerate(batch):
                x[i, : len(ids)] = torch.tensor(ids)
            with torch.inference_mode():
                probs = self.model(x)
            top_p, top_i = probs.max(-1)
            for i, (_, fut) in enumerate(batch):
                fut.set_result((int(top_i[i]), float(top_p[i])))
            self.served += len(batch)
            self.batches += 1


def client(server, n_requests, marks, window=64):
    import random
    rng = random.Random(0)
    pending = []
    for r in range(n_requests):
        length = min(200, max(4, int(rng.lognormvariate(3.2, 0.6))))
        pending.append(server.submit([rng.randrange(1, VOCAB) for _ in range(length)]))
        if len(pending) >= window:
            pending.pop(0).result()
        if (r + 1) % 500 == 0:
            marks.append((r + 1, _truth.rss(), _truth.elapsed()))
    for f in pending:
        f.result()
    server.requests.put(None)


def main(n_requests=45_000):
    rss_start = _truth.rss()
    server = Server(IntentModel())
    # warm-up request compiles the model before the load test
    warm = server.submit([5, 6, 7, 8, 9])
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    warm.result()
    rss_compiled = _truth.rss()
    t_compiled = _truth.elapsed()
    marks = []
    client(server, n_requests, marks)
    t.join()
    from torch._dynamo.utils import counters
    warm_marks = [(n, r) for n, r, _ in marks if n >= 5000]
    print(f"served {server.served} requests in {server.batches} batches, "
          f"compile {t_compiled:.1f}s, total {_truth.elapsed():.1f}s")
    _truth.write(
        requests=server.served,
        batches=server.batches,
        rss_start_bytes=rss_start,
        compile_jump_bytes=rss_compiled - rss_start,
        compile_seconds=t_compiled,
        rate_after_warmup_bytes_per_request=_truth.slope(*zip(*warm_marks)),
        growth_after_warmup_bytes=warm_marks[-1][1] - warm_marks[0][1],
        unique_graphs=counters["stats"]["unique_graphs"],
        queue_maxsize=server.requests.maxsize,
        rss_series=[[n, r] for n, r, _ in marks[::4]],
    )


if __name__ == "__main__":
    main()
