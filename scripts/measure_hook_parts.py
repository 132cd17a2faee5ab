"""What each part of the zero-code hooks costs a training step, inside one process.

Run it under the collector (so that the hooks are loaded and every mark really goes out):

    OMP_NUM_THREADS=1 collector run -q -o /tmp/parts.oomt -- python scripts/measure_hook_parts.py

A one-layer model, so that the hooks' cost shows against its short step. Blocks of steps
alternate between hooks off (`pause()`), on, and on with one part stubbed out (the marks not
sent; sent as datagrams instead of through the ring; backward not watched; the leak watch off),
ROUNDS times; prints each variant's median microseconds of this thread's CPU per step (stderr;
ROUNDS=N, STEPS=N a block and ONLY=off,on in the environment). A part's cost is "on" minus "on
without it".
"""

import os
import statistics
import sys
import time

import torch
import torch.nn as nn

ROUNDS, STEPS = int(os.environ.get("ROUNDS", 8)), int(os.environ.get("STEPS", 500))
# ONLY=off,on: just those variants (more rounds in the same time, blocks closer together).
ONLY = [v for v in os.environ.get("ONLY", "").split(",") if v]


def main():
    try:
        import oomscope._hooks as h
        from oomscope._hooks import forward, memory
        from oomscope._hooks.state import S
    except ImportError:
        h = None
    if h is None or S.probe is None or not S.probe.enabled:
        sys.exit("run this under `collector run` (the zero-code hooks are not loaded)")
    torch.set_num_threads(1)
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 16)

    def block(steps=STEPS):
        start = time.thread_time()
        for _ in range(steps):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return (time.thread_time() - start) / steps * 1e6

    block(300)  # warm-up; the root is found
    # Each variant: the parts stubbed out, as (owner, attribute, stand-in).
    variants = {
        "off": [],
        "on": [],
        "on, marks not sent": [(S.probe, "hook_mark", lambda *a, **k: None)],
        "on, marks built, no send": [(S.probe.transport, "ring_write", lambda data, now=0: True)],
        "on, datagrams, no ring": [(S.probe.transport, "ring_write", lambda data, now=0: False)],
        "on, no own reading": [(S.probe, "_at_line", lambda memory=False, now=None: "at 0")],
        "on, backward not watched": [(forward, "watch_backward", lambda output: None)],
        "on, no leak watch": [(memory, "watch_held", lambda now: None)],
    }
    if ONLY:
        variants = {name: stubs for name, stubs in variants.items() if name in ONLY}
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, stubs in variants.items():
            (h.pause if name == "off" else h.resume)()
            saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in stubs]
            for owner, attr, fn in stubs:
                setattr(owner, attr, fn)
            times[name].append(block())
            for owner, attr, original in saved:
                setattr(owner, attr, original)
    h.resume()
    for name, values in times.items():
        print("%-26s %7.1f us/step" % (name, statistics.median(values)), file=sys.stderr)


if __name__ == "__main__":
    main()
