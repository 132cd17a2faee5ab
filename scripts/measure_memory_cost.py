"""What the zero-code breakdown and leak census cost, in the process that pays for them: the
13 M-parameter GPT of `collector/tests/torch_programs/train.py` with AdamW on CPU after one
step, `oomscope._hooks.breakdown.measure` (run at iterations 1, 4, 16, ...), the per-iteration
memory reading (`oomscope._hooks.held.memory_now`), and one census plus the comparison of two (`census`,
`grown`) in a process holding about a million Python objects; then the count of the containers
the program names that runs beside each census and at each epoch's start (`containers`,
`objects_grown`), with a module-level dict of 100 000 entries that gained 5 000. Medians of
`--rounds` runs.
Usage: $OOMSCOPE_TORCH_VENV/bin/python scripts/measure_memory_cost.py [--objects N]"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, os.path.join(root, "collector", "python"))
from oomscope._hooks import breakdown, held  # noqa: E402


def load_train():
    spec = importlib.util.spec_from_file_location(
        "train", os.path.join(root, "collector", "tests", "torch_programs", "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_ms(fn, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--objects", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    train = load_train()
    vocab = 8192
    model = train.GPT(vocab, 320, 6, 5, 128, ckpt=False)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (8, 128))

    def step():
        loss = F.cross_entropy(model(x).view(-1, vocab), x.view(-1))
        loss.backward()
        opt.step()

    step_ms = median_ms(step, a.rounds)
    frame = sys._getframe()
    b = breakdown.measure(torch, [opt], frame)
    measure_ms = median_ms(lambda: breakdown.measure(torch, [opt], frame), a.rounds)
    reading_us = median_ms(lambda: [held.memory_now(torch) for _ in range(1000)], a.rounds)
    junk = [[i] for i in range(a.objects)]  # a million Python objects, as a large program has
    import gc

    objects = len(gc.get_objects())
    first = held.census(torch, frame)[:2]
    census_ms = median_ms(lambda: held.census(torch, frame), a.rounds)
    second = held.census(torch, frame)
    grown_ms = median_ms(lambda: held.grown(torch, frame, first, second, 8),
                         a.rounds)
    del second, junk
    global CACHE
    CACHE = {"k%d" % i: [i] * 8 for i in range(100_000)}
    before = held.keep_only_lengths(held.containers(torch, frame))
    for i in range(5_000):
        CACHE["n%d" % i] = [i] * 8
    kept = held.containers(torch, frame)
    containers_ms = median_ms(lambda: held.containers(torch, frame), a.rounds)
    objects_ms = median_ms(lambda: held.objects_grown(torch, before, kept, 8), a.rounds)
    rows = held.objects_grown(torch, before, kept, 8)
    print("GPT %.1f M parameters, step %.1f ms (CPU)" % (params / 1e6, step_ms))
    print("breakdown: %.2f ms (parameters %d B, optimizer state %d B)" % (
        measure_ms, b["parameters_bytes"], b["optimizer_state_bytes"]))
    print("memory reading: %.1f us" % reading_us)
    print("census with %d objects: %.0f ms; comparing two: %.0f ms" % (
        objects, census_ms, grown_ms))
    print("containers the program names (%d): %.2f ms; comparing two: %.2f ms (%s: +%d, %d B)" % (
        len(kept), containers_ms, objects_ms, rows[0].holder, rows[0].count, rows[0].bytes))


if __name__ == "__main__":
    main()
