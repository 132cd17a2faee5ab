"""Reference cycles freed by the garbage collector (issue 42, case 8): each step keeps a record of
its batch in an object that refers to itself (`rec.me = rec`, the way a callback or a closure
stored on its owner does), so nothing frees it when the step ends; Python's generation-0
collection frees them every ~80 steps (each step leaves ~9 objects the collector tracks; it
runs at 700). Memory saw-tooths: not a leak, and not tensors
"held from C++". The program counts its own collections that found garbage and the memory those
freed (glibc's bytes in use before and after, as oomscope reads them) in its truth file.

EXPECT = {
    "findings": ["reference-cycles"],
    "absent": ["leak", "eval-peak", "eval-retains-memory"],
    "words": ["Record"],
    "no_words": ["held from C++", "Tensors accumulate"],
}
"""

import argparse
import gc
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


class Record:
    """What a step keeps of itself, with a reference to itself (a cycle)."""

    def __init__(self, step, batch):
        self.step = step
        self.batch = batch
        self.notes = [[] for _ in range(6)]  # a few small objects, the collector's to count
        self.me = self


collections = []


def watch(phase, info):
    if phase == "stop" and info.get("collected", 0) > 0:
        collections.append((info["generation"], info["collected"]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=320)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    gc.callbacks.append(watch)
    for step in range(a.steps):
        x = torch.randn(4096, 512)  # 8 MiB
        y = torch.randint(0, 10, (4096,))
        Record(step, x)
        loss = F.cross_entropy(model(x[:256]), y[:256])  # the record keeps all of x
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        time.sleep(0.002)
    gc.callbacks.remove(watch)
    _truth.write(steps=a.steps, collections_with_garbage=len(collections))
    print("steps %d collections %d loss %.4f" % (a.steps, len(collections), loss.item()))


if __name__ == "__main__":
    main()
