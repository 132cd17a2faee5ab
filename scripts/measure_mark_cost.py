"""What a mark costs the program inside a training loop, through the ring and as a datagram.

Run it under the collector (a two-layer MLP; six marks a step, timed one by one, so that the
model's own time does not enter the figure):

    OMP_NUM_THREADS=1 collector run -q -o /tmp/m.oomt -- python scripts/measure_mark_cost.py

Blocks of 200 steps alternate between the helper's ring of shared memory and datagrams (the ring
set aside), 15 rounds; prints each way's median and lowest microseconds of marks per step. With
`--parts`, times the helper's parts instead, each called six times a step in the same loop
(median microseconds a call over 10 rounds). Inside
a loop every line of Python and every system call costs several times what it does in a tight
loop (caches), which is why the marks are timed here and not in isolation.
"""

import statistics
import sys
import time

import torch

from oomscope._probe import default_probe

ROUNDS, STEPS = 15, 200


def main():
    torch.set_num_threads(1)
    p = default_probe()
    if not p.enabled:
        sys.exit("run this under `collector run`")
    m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(64, 256)
    pc = time.perf_counter

    def block():
        spent = 0.0
        for i in range(STEPS):
            for stage in ("pre_forward",):
                t = pc(); p._mark(stage, step=i); spent += pc() - t
            y = m(x).square().mean()
            for stage in ("post_forward", "pre_backward"):
                t = pc(); p._mark(stage, step=i); spent += pc() - t
            y.backward()
            for stage in ("post_backward", "pre_optimizer_step"):
                t = pc(); p._mark(stage, step=i); spent += pc() - t
            opt.step()
            opt.zero_grad()
            t = pc(); p._mark("post_optimizer_step", step=i); spent += pc() - t
        return spent / STEPS * 1e6

    if "--parts" in sys.argv:
        return parts(p, m, opt, x)
    block()  # warm-up; the ring is made at the first message
    t = p.transport
    ring = t._ring
    if ring is None:
        sys.exit("no ring was made (not x86-64, or OOMSCOPE_RING=0)")
    res = {"ring": [], "datagram": []}
    for r in range(ROUNDS):
        for name in (res if r % 2 else reversed(list(res))):
            t._ring, t._ring_tries = (ring, 0) if name == "ring" else (None, 10 ** 6)
            res[name].append(block())
    t._ring = ring
    for name, values in res.items():
        print("%-9s marks %.1f us/step median, %.1f lowest (6 marks)" % (
            name, statistics.median(values), min(values)), file=sys.stderr)
    print("dropped by the helper: %d" % t.dropped, file=sys.stderr)


def parts(p, m, opt, x):
    pc = time.perf_counter
    p._mark("pre_forward", step=0)  # the ring is made
    message = b"at 1\nmark post_forward step=1 pid=1"
    calls = {
        "the whole _mark": lambda i: p._mark("post_forward", step=i),
        "allocator fields": lambda i: p.allocator_fields(),
        "at line, statm read": lambda i: p._at_line(memory=True),
        "at line, no read": lambda i: p._at_line(),
        "send (a built line)": lambda i: p.send("mark post_forward step=1 pid=1"),
        "ring write": lambda i: p.transport.ring_write(message),
        "time.monotonic_ns": lambda i: time.monotonic_ns(),
        "nothing (the timer)": lambda i: None,
    }

    def block(fn, steps=100):
        spent = 0.0
        for i in range(steps):
            y = m(x).square().mean()
            for _ in range(3):
                t = pc(); fn(i); spent += pc() - t
            y.backward()
            for _ in range(3):
                t = pc(); fn(i); spent += pc() - t
            opt.step()
            opt.zero_grad()
        return spent / steps / 6 * 1e6

    times = {name: [] for name in calls}
    for _ in range(10):
        for name, fn in calls.items():
            times[name].append(block(fn))
    for name, values in times.items():
        print("%-22s %.2f us a call" % (name, statistics.median(values)), file=sys.stderr)


if __name__ == "__main__":
    main()
