#!/usr/bin/env python3
"""Measures `collector run` watching a node of 8 rank processes for BENCHMARKS.md: the collector's
own CPU (its threads only, from /proc/PID/stat) and peak RSS (VmHWM), at a sampling rate, against
the same collector watching one process. Each rank is a Python process started the way torchrun
starts them (RANK, LOCAL_RANK, WORLD_SIZE in its environment) that holds 64 MiB and marks four
stages every 200 ms through the marker helper; no GPU (NVML absent), so the per-process GPU query
is not in these figures.

usage: measure_ranks.py COLLECTOR PYTHONPATH SECONDS INTERVAL_MS [RANKS]
"""
import os, subprocess, sys, tempfile, time

collector, pythonpath, seconds, interval = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
ranks = int(sys.argv[5]) if len(sys.argv) > 5 else 8
RANK = """
import os, sys, time, oomscope_probe as oom
held = bytearray(64 << 20); held[::4096] = b"\\x01" * (len(held) // 4096)
end = time.monotonic() + float(sys.argv[1]); step = 0
while time.monotonic() < end:
    oom.step(step)
    for stage in ("pre_forward", "post_forward", "post_backward", "post_optimizer_step"):
        oom.mark(stage); time.sleep(0.05)
    step += 1
"""
LAUNCHER = """
import os, subprocess, sys
n, secs, code = int(sys.argv[1]), sys.argv[2], sys.argv[3]
procs = [subprocess.Popen([sys.executable, "-c", code, secs],
                          env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n)))
         for r in range(n)]
for p in procs: p.wait()
"""

def ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, this process's threads

def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

def measure(label, n):
    tmp = tempfile.mkdtemp()
    trace = os.path.join(tmp, "t.oomt")
    env = dict(os.environ, PYTHONPATH=pythonpath, OOMSCOPE_NVML_LIB="/nonexistent/libnvidia-ml.so.1")
    cmd = [collector, "run", "-q", "--interval-ms", str(interval), "-o", trace, "--",
           sys.executable, "-c", LAUNCHER, str(n), str(seconds), RANK]
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    last = (0, 0, start)
    while p.poll() is None:
        try:
            last = (ticks(p.pid), hwm_kib(p.pid), time.monotonic())
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.25)
    cpu = last[0] / os.sysconf("SC_CLK_TCK")
    wall = last[2] - start
    print("%s: %d rank process(es) at %d Hz for %.0f s: collector CPU %.2f s = %.2f%% of one core, "
          "peak RSS %.1f MiB, trace %.2f MiB"
          % (label, n, 1000 // interval, wall, cpu, 100 * cpu / wall, last[1] / 1024,
             os.path.getsize(trace) / (1 << 20)), flush=True)

measure("one process", 1)
measure("node", ranks)
