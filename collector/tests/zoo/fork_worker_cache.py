"""Forked DataLoader workers that cache decoded items: `spawn_workers.py`'s loop with
`multiprocessing_context="fork"` (Linux's default before Python 3.14). Each worker's memory grows
by what it keeps itself (~288 MiB of decoded tensors each through the first epoch), not by
copying its parent's pages: it must be told as the workers' own memory, with cache advice, never
the copy-on-write story and its "keep the dataset out of Python objects" advice.
It runs 8 epochs (the caches full after the first; the cached ones take ~0.3 s each): with 4, the
program ended ~1 s after its workers' caches filled, inside the collector's documented limit (a
worker's memory is read about once a second at its CPU budget; growth in the last second of a
worker's life can be read short: docs/pytorch.md), and CI read 0.71-0.89 of them.

EXPECT = {
    "findings": ["worker-private-growth"],
    "absent": ["leak", "eval-peak", "eval-retains-memory"],
    "words": ["started by fork grow their own memory"],
    "no_words": ["copied their parent", "copy their parent", "reference counts"],
}
"""

import sys

import spawn_workers

if __name__ == "__main__":
    sys.argv[1:] = ["--context", "fork", "--epochs", "8"] + sys.argv[1:]
    spawn_workers.main()
