"""Measures what the zero-code PyTorch hooks cost a training loop, inside one process.

Run it under the collector (so that the hooks are loaded and every mark really goes out):

    collector run -q -o /tmp/zc.oomt -- python scripts/measure_zero_code.py [--model gpt13m|small]

Figures (JSON on stdout):
- the hooks' own cost per step, in microseconds, on a one-layer model (steps alternating one by
  one), and that cost as a share of each real model's step: the figure the target is about;
- per-step overhead, directly: blocks of steps alternate between hooks on (`resume()`) and off (`pause()`)
  in the same process, so both halves see the same caches, allocator state and machine load;
  the overhead is the ratio of the median step times, with a 95% bootstrap interval over blocks;
- cost per module call of the global hooks (the search for the roots) and of the hooks on the
  roots alone, on a model of many small modules, against no hooks;
- cost of one mark as the hooks send it (without allocator statistics on CPU).
"""

import argparse
import json
import random
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, "collector/tests/torch_programs")
from train import GPT  # noqa: E402  (the test suite's real model)

MODELS = {
    # ~13 M parameters: 6 blocks of width 320, vocabulary 8192, context 128.
    "gpt13m": dict(vocab=8192, d=320, layers=6, heads=5, seq=128, batch=8),
    "small": dict(vocab=512, d=128, layers=2, heads=4, seq=64, batch=8),
}


def hooks():
    try:
        import oomscope._hooks as module
        from oomscope._hooks.state import S
    except ImportError:
        module = None
    if module is None or S.probe is None or not S.probe.enabled:
        sys.exit("run this under `collector run` (the zero-code hooks are not loaded)")
    return module


def steps_per_block_time(model, opt, x, y, vocab, n):
    start = time.perf_counter()
    for _ in range(n):
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / n


def bootstrap_ratio(on, off, rounds=2000, seed=0):
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        a = [rng.choice(on) for _ in on]
        b = [rng.choice(off) for _ in off]
        ratios.append(statistics.median(a) / statistics.median(b))
    ratios.sort()
    return ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds)]


def step_overhead(h, name, pairs, block):
    cfg = MODELS[name]
    torch.manual_seed(0)
    model = GPT(cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["seq"])
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]))
    y = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]))
    steps_per_block_time(model, opt, x, y, cfg["vocab"], 10)  # warm-up; finds the root
    assert h._S.mode == "roots", h._S.mode
    on, off = [], []
    for i in range(pairs):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")
        for state in order:
            (h.resume if state == "on" else h.pause)()
            t = steps_per_block_time(model, opt, x, y, cfg["vocab"], block)
            (on if state == "on" else off).append(t)
    h.resume()
    ratio = statistics.median(on) / statistics.median(off)
    low, high = bootstrap_ratio(on, off)
    return {
        "model": name,
        "parameters": params,
        "step_ms_off": statistics.median(off) * 1e3,
        "step_ms_on": statistics.median(on) * 1e3,
        "overhead_percent": (ratio - 1) * 100,
        "overhead_95ci_percent": [(low - 1) * 100, (high - 1) * 100],
        "blocks_per_side": pairs,
        "steps_per_block": block,
        "marks_per_step": 6,
    }


def absolute_step_cost(h, steps=400, seed=0):
    """The hooks' own cost per training step, in microseconds: a tiny model (one Linear layer)
    whose step is short enough that the difference shows, steps alternating one by one between
    hooks on and off in random order. On the roots the cost does not depend on the model's size
    (submodules are not hooked), so this divided by a real model's step time is its overhead."""
    torch.manual_seed(0)
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 16)

    def one_step():
        start = time.perf_counter_ns()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter_ns() - start

    for _ in range(20):
        one_step()  # warm-up; the root is found
    rng = random.Random(seed)
    on, off = [], []
    for _ in range(steps):
        for state in rng.sample(["on", "off"], 2):
            (h.resume if state == "on" else h.pause)()
            (on if state == "on" else off).append(one_step() / 1e3)
    h.resume()
    diff = statistics.median(on) - statistics.median(off)
    rounds, diffs = 2000, []
    for _ in range(rounds):
        a = [rng.choice(on) for _ in on]
        b = [rng.choice(off) for _ in off]
        diffs.append(statistics.median(a) - statistics.median(b))
    diffs.sort()
    return {"us_per_step": diff, "us_per_step_95ci": [diffs[50], diffs[1949]],
            "tiny_step_us_off": statistics.median(off), "steps_per_side": steps}


def module_call_cost(h, repeats):
    """A Sequential of 200 tiny Linear layers, forward only, no grad: the time of one forward
    (201 module calls) without hooks, with the global hooks of the search, with hooks on the
    root alone (two marks per forward included)."""
    n = 200
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(n)])
    x = torch.ones(1, 8)

    def per_forward():
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(20):
                model(x)
            best = min(best, (time.perf_counter() - start) / 20)
        return best

    roots_after = h._ROOTS_AFTER
    h._ROOTS_AFTER = 10**9  # stay in the search while it is timed
    try:
        with torch.no_grad():
            h.pause()
            none = per_forward()
            h.resume()
            h._search()
            search = per_forward()
            h._roots_only()
            roots = per_forward()
    finally:
        h._ROOTS_AFTER = roots_after
    calls = n + 1
    return {
        "modules_per_forward": calls,
        "us_per_forward_no_hooks": none * 1e6,
        "us_per_forward_searching": search * 1e6,
        "us_per_forward_roots_only": roots * 1e6,
        "added_us_per_module_call_searching": (search - none) / calls * 1e6,
        "added_us_per_forward_roots_only": (roots - none) * 1e6,
    }


def mark_cost(h, n=20000):
    from oomscope._hooks.state import S

    probe = S.probe
    start = time.perf_counter()
    for i in range(n):
        probe.mark("bench_mark", step=i, phase="train")
    return {"us_per_mark": (time.perf_counter() - start) / n * 1e6,
            "cuda": torch.cuda.is_available() and torch.cuda.is_initialized()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), action="append")
    p.add_argument("--pairs", type=int, default=12)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    h = hooks()
    absolute = absolute_step_cost(h)
    overheads = [step_overhead(h, m, args.pairs, args.block)
                 for m in (args.model or ["gpt13m", "small"])]
    for o in overheads:
        o["hooks_share_of_step_percent"] = absolute["us_per_step"] / (o["step_ms_off"] * 1e3) * 100
    out = {"torch": torch.__version__, "threads": args.threads,
           "hooks_cost_per_step": absolute,
           "step_overhead": overheads,
           "module_calls": module_call_cost(h, repeats=15),
           "mark": mark_cost(h)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
