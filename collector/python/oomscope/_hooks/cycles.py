"""What the garbage collector frees: memory that only it frees (objects in a reference cycle)
rises between its collections and falls at them, a saw-tooth that is not a leak.

`GcWatch` times collections through `gc.callbacks`, with `held.memory_now` read before and
after (glibc's `mallinfo2` sees a free the RSS does not: a heap it does not trim); one after
which it was at least `GC_MIN_FREED_BYTES` lower is sent as a `gc` record. Generation 0 runs
every 700 allocations, so it is read around only while the last one found garbage (a program
making cycles: they are what it frees) and one in `YOUNG_PROBE_EVERY` otherwise (2.7 us a
collection with the callback itself, against 0.1 us without it: BENCHMARKS.md). The leak
watch's counts (`held`) run with the collector off, so that one does not free the cycles it is
looking at.
"""

import time

from oomscope._hooks.held import memory_now

GC_MIN_FREED_BYTES = 1 << 20  # a collection freeing less is not sent
YOUNG_PROBE_EVERY = 16  # generation-0 collections read around while none finds garbage


class GcWatch:
    """`gc.callbacks` entry: times collections and reports, through `send`, those that freed
    memory (see the module docs)."""

    def __init__(self, torch, send):
        self.torch = torch
        self.send = send  # (generation, collected, freed_bytes, pause_us)
        self.before = None
        self.started = 0.0
        self.young = 0  # generation-0 collections begun
        self.young_found = False  # the last generation-0 collection found garbage

    def __call__(self, phase, info):
        try:
            generation = info.get("generation", 0)
            if phase == "start":
                if generation == 0:
                    # Generation 0 runs every 700 allocations: read around it while the last
                    # one found garbage (a program making reference cycles), else one in
                    # `YOUNG_PROBE_EVERY`.
                    self.young += 1
                    if not self.young_found and self.young % YOUNG_PROBE_EVERY:
                        self.before = None
                        return
                self.before = memory_now(self.torch)
                self.started = time.perf_counter()
                return
            collected = info.get("collected", 0)
            if generation == 0:
                self.young_found = collected > 0
            before, self.before = self.before, None
            if before is None:
                return
            pause_us = int((time.perf_counter() - self.started) * 1e6)
            after = memory_now(self.torch)
            if after is not None and before - after >= GC_MIN_FREED_BYTES:
                self.send(generation, collected, before - after, pause_us)
        except Exception:  # never into the collector's caller: it could be any allocation
            pass
