"""Query-encoder training with a background thread that monitors retrieval recall.

Every step the training loop puts a copy of the batch's query embeddings and
their target ids on ``monitor_queue = queue.Queue()`` (module global, no
maxsize).  A daemon thread takes items off the queue, searches the corpus
embeddings (20k x 512) for the 10 nearest neighbours of each query and keeps a
running recall@10.  The nearest-neighbour search costs several training steps'
worth of compute per item, so the monitor thread falls further behind every
step and the queue keeps growing; nothing ever blocks the producer.

Correct diagnosis: resident memory grows linearly with training steps, by the
part of each step's queued item (a 256x512 float tensor, ``item_bytes``) that
the monitor could not consume (about ``queue_bytes_per_step`` of tensors; the
resident memory grows ~1.5-1.8x that, ``rss_floor_slope_per_step``, because the
queued 512 KiB tensors and the per-step temporaries fragment the heap), without
bound.
It is held by the unbounded ``monitor_queue`` between the training loop and
the monitor thread.  Fix: give the queue a maxsize and drop or skip items when
it is full (``put_nowait`` + ``queue.Full``), or monitor only every N-th step.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "rss_floor_slope_per_step",
    "rate_tolerance": 0.33,
    "holder": "monitor_queue",
    "memory_kind": "tensors",
    "advice": "Bound monitor_queue (queue.Queue(maxsize=...) with put_nowait, dropping items when full) or only enqueue every N-th step, so the producer cannot run ahead of the slow monitor thread.",
    "findings": ["leak"],
    "absent": ["model-copies", "reference-cycles", "worker-private-growth"],
    "words": ["queue"],
    "no_words": [],
    "holder_bytes_key": "queue_bytes_at_end",
}
"""
import os
import queue
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

STEPS = _truth.pick(500, 30)
BATCH = 256
FEAT = 256
EMB = 512
CORPUS = _truth.pick(20_000, 4_000)

monitor_queue = queue.Queue()
recall_log = []
stop_monitor = threading.Event()


def monitor(corpus_emb):
    hits = seen = 0
    while not stop_monitor.is_set():
        try:
            step, q, target = monitor_queue.get(timeout=0.1)
        except queue.Empty:
            continue
        d = torch.cdist(q, corpus_emb)
        nn_idx = d.topk(10, largest=False).indices
        hits += (nn_idx == target[:, None]).any(1).sum().item()
        seen += q.shape[0]
        recall_log.append((step, hits / seen))


def main():
    g = torch.Generator().manual_seed(1)
    corpus_x = torch.randn(CORPUS, FEAT, generator=g)
    doc_tower = nn.Sequential(nn.Linear(FEAT, EMB))
    query_tower = nn.Sequential(nn.Linear(FEAT, 1024), nn.GELU(), nn.Linear(1024, EMB))
    with torch.no_grad():
        corpus_emb = F.normalize(doc_tower(corpus_x), dim=1)
    opt = torch.optim.Adam(query_tower.parameters(), lr=1e-3)
    t = threading.Thread(target=monitor, args=(corpus_emb,), daemon=True)
    t.start()

    floor = _truth.Floor()
    qsizes = []
    item_bytes = BATCH * EMB * 4 + BATCH * 8
    for step in range(STEPS):
        target = torch.randint(0, CORPUS, (BATCH,), generator=g)
        x = corpus_x[target] + 0.7 * torch.randn(BATCH, FEAT, generator=g)
        q = F.normalize(query_tower(x), dim=1)
        logits = q @ corpus_emb[target].T / 0.05
        loss = F.cross_entropy(logits, torch.arange(BATCH))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        monitor_queue.put((step, q.detach().clone(), target))
        qsizes.append(monitor_queue.qsize())
        floor.end_unit()
        if step % 50 == 0:
            r = recall_log[-1][1] if recall_log else float("nan")
            print(f"step {step:4d}  loss {loss.item():.3f}  recall@10 {r:.3f}  "
                  f"queued {qsizes[-1]:4d}  rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    pending = monitor_queue.qsize()
    queued_bytes = _truth.storage_bytes(
        t for item in list(monitor_queue.queue) for t in item[1:])
    stop_monitor.set()
    t.join(timeout=30)
    _truth.write(
        steps=STEPS,
        item_bytes=item_bytes,
        queue_len_at_end=pending,
        queue_bytes_at_end=queued_bytes,
        queue_items_per_step=_truth.tail_slope(qsizes, 0.1),
        queue_bytes_per_step=_truth.tail_slope(qsizes, 0.1) * item_bytes,
        items_consumed=len(recall_log),
        rss_floor_slope_per_step=floor.rate(skip_frac=0.1),
        rss_floor_growth=floor.floors[-1] - floor.floors[0],
        **floor.summary("step"),
    )


if __name__ == "__main__":
    main()
