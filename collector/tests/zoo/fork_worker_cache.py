"""Forked DataLoader workers that cache decoded items: `spawn_workers.py`'s loop with
`multiprocessing_context="fork"` (Linux's default before Python 3.14). Each worker's memory grows
by what it keeps itself (~288 MiB of decoded tensors each through the first epoch), not by
copying its parent's pages: it must be told as the workers' own memory, with cache advice, never
the copy-on-write story and its "keep the dataset out of Python objects" advice.

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
    sys.argv[1:] = ["--context", "fork"] + sys.argv[1:]
    spawn_workers.main()
