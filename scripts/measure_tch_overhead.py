#!/usr/bin/env python3
"""Step-time overhead of the tch instrumentation: the GPT example uninstrumented (`--trace none`,
no collector) against the same run under `collector run` at the default 100 Hz (marks with
allocator snapshots on CUDA, gradient statistics every step, logits statistics every 10 steps).
Runs alternate so that machine drift hits both equally; medians are reported.

usage: measure_tch_overhead.py COLLECTOR GPT RUNS STEPS [extra gpt args...]
"""
import re, statistics, subprocess, sys

collector, gpt, runs, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
extra = sys.argv[5:]
base = [gpt, "--steps", steps, "--eval-every", "0"] + extra

def ms_per_step(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"\(([0-9.]+) ms/step\)", out).group(1))

off, on = [], []
for i in range(runs):
    off.append(ms_per_step(base + ["--trace", "none"]))
    on.append(ms_per_step([collector, "run", "-q", "-o", "/tmp/oomscope-overhead.oomt", "--"] + base))
    print("run %d: off %.3f ms/step, instrumented %.3f ms/step" % (i + 1, off[-1], on[-1]), flush=True)
m_off, m_on = statistics.median(off), statistics.median(on)
print("median: off %.3f ms/step, instrumented %.3f ms/step, overhead %+.2f%%"
      % (m_off, m_on, 100 * (m_on - m_off) / m_off))
