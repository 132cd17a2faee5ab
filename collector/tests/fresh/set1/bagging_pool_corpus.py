"""Bagged text classifiers trained in parallel with a multiprocessing Pool.

The parent tokenises a synthetic corpus of 200 000 documents into a Python
list of lists of token ids (`corpus`, ~40 ints per document, ~300 MB of Python
objects by sys.getsizeof) and then starts `multiprocessing.Pool(2)` (fork) to
train 4 bootstrap members of an EmbeddingBag classifier; the parent averages
their predictions on a held-out set. Fork shares the parent's pages
copy-on-write, but every time a worker reads a document it increments the
reference counts of the list and of its int objects, which writes to those
pages, so the kernel copies them into the worker. Each worker's private memory
therefore grows while it trains its first member until it holds its own copy
of the corpus pages, and stays there: the second member it trains adds
nothing. Measured: each worker's Private_Dirty grows by ~420 MiB, of which
~150 MiB is the worker's own training state and torch buffers (a control run
with a tiny corpus grows ~150 MiB) and ~270-290 MiB is the copied corpus; the
process tree's PSS is about twice the parent's RSS. The growth is in the child
processes, not the parent, and it is bounded. A correct diagnosis names the
workers' private (copy-on-write) growth caused by the parent's `corpus` of
Python objects, and advises keeping the corpus in flat arrays (one token
tensor + offsets, or numpy) so fork shares it for real, or building the data
inside each worker.

EXPECT = {
    "symptom": "bounded",
    "unit": None,
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "corpus",
    "memory_kind": "child_processes",
    "advice": "store the corpus in flat arrays (tensor/numpy) instead of Python lists",
    "findings": ["worker-private-growth"],
    "absent": ["leak", "shm-pressure", "reference-cycles"],
    "words": ["corpus"],
    "no_words": ["DataLoader"],
    "bound_key": "worker_private_growth_bytes",
}
"""
import itertools
import multiprocessing as mp
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

VOCAB, N_DOCS, N_CLASSES, MEMBERS = 30_000, 200_000, 4, 4


def make_corpus(n, seed):
    rng = random.Random(seed)
    docs, labels = [], []
    for _ in range(n):
        label = rng.randrange(N_CLASSES)
        length = rng.randint(20, 60)
        # each class prefers its own slice of the vocabulary
        docs.append([rng.randrange(label * 7_000, label * 7_000 + 9_000) if rng.random() < 0.3
                     else rng.randrange(VOCAB) for _ in range(length)])
        labels.append(label)
    return docs, labels


def to_batch(docs):
    flat = torch.tensor(list(itertools.chain.from_iterable(docs)))
    offsets = torch.tensor([0] + [len(d) for d in docs[:-1]]).cumsum(0)
    return flat, offsets


class BagClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, 64, mode="mean")
        self.out = nn.Linear(64, N_CLASSES)

    def forward(self, flat, offsets):
        return self.out(self.emb(flat, offsets))


def train_member(member):
    before = _truth.smaps_rollup()
    torch.manual_seed(member)
    rng = random.Random(100 + member)
    model = BagClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    idx = [rng.randrange(len(corpus)) for _ in range(len(corpus))]  # bootstrap
    steps = 0
    for start in range(0, len(idx), 512):
        rows = idx[start:start + 512]
        flat, offsets = to_batch([corpus[i] for i in rows])
        y = torch.tensor([labels[i] for i in rows])

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(model(flat, offsets), y)
            loss.backward()
            return loss

        loss = opt.step(closure)
        steps += 1
    after = _truth.smaps_rollup()
    return {"member": member, "pid": os.getpid(), "steps": steps, "loss": loss.item(),
            "private_dirty_before": before.get("Private_Dirty", 0),
            "private_dirty_after": after.get("Private_Dirty", 0),
            "rss_after": after.get("Rss", 0), "pss_after": after.get("Pss", 0),
            "state": model.state_dict()}


def corpus_bytes(docs):
    return sum(sys.getsizeof(d) + sum(sys.getsizeof(t) for t in d) for d in docs)


if __name__ == "__main__":
    mp.set_start_method("fork")
    corpus, labels = make_corpus(N_DOCS, seed=0)
    held_docs, held_labels = make_corpus(4_000, seed=1)
    rss_parent = _truth.rss_bytes()
    print(f"corpus ready: {len(corpus)} docs, parent RSS {rss_parent / 2**20:.0f} MiB")

    with mp.Pool(2) as pool:
        results = pool.map(train_member, range(MEMBERS), chunksize=1)
        tree_pss = _truth.tree_pss_bytes()
        worker_pss = {p: _truth.smaps_rollup(p).get("Pss", 0) for p in _truth.children()}

    flat, offsets = to_batch(held_docs)
    probs = torch.zeros(len(held_docs), N_CLASSES)
    for r in results:
        m = BagClassifier()
        m.load_state_dict(r.pop("state"))
        with torch.no_grad():
            probs += m(flat, offsets).softmax(-1) / MEMBERS
        print(f"member {r['member']} pid {r['pid']} loss {r['loss']:.3f} "
              f"private {r['private_dirty_before'] / 2**20:.0f} -> {r['private_dirty_after'] / 2**20:.0f} MiB")
    acc = (probs.argmax(1) == torch.tensor(held_labels)).float().mean().item()
    print(f"ensemble accuracy {acc:.3f}")

    by_pid = {}
    for r in results:  # first member each worker ran shows the growth
        by_pid.setdefault(r["pid"], []).append(r)
    growth = [rs[0]["private_dirty_after"] - rs[0]["private_dirty_before"] for rs in by_pid.values()]
    second = [rs[1]["private_dirty_after"] - rs[0]["private_dirty_after"]
              for rs in by_pid.values() if len(rs) > 1]
    _truth.write(
        unit="ensemble_member",
        members=MEMBERS,
        workers=len(by_pid),
        optimizer_steps_per_member=results[0]["steps"],
        corpus_docs=N_DOCS,
        corpus_bytes=corpus_bytes(corpus),
        rss_parent_after_corpus=rss_parent,
        worker_private_growth_bytes=sum(growth) / len(growth),
        worker_private_growth_second_member_bytes=(sum(second) / len(second)) if second else None,
        worker_results=results,
        tree_pss_before_pool_close=tree_pss,
        worker_pss=list(worker_pss.values()),
        ensemble_accuracy=acc,
    )
