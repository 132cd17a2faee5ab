#!/usr/bin/env python3
"""Measures `collector run` overhead for BENCHMARKS.md: CPU share of one core at a sampling
rate, peak RSS, and trace bytes per hour, watching an idle program (`sleep`) so that only the
collector's own work is counted. GPU sampling goes through the fake NVML library (one device),
so NVML's own per-call cost (~12 us on real drivers) is NOT included; add ~1.2% of a core at
1 kHz for it on real hardware.

usage: measure_collector.py COLLECTOR FAKE_NVML_SO SECONDS INTERVAL_MS [INTERVAL_MS...]
"""
import json, os, resource, subprocess, sys, tempfile, time

collector, fake, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
intervals = [int(x) for x in sys.argv[4:]]
script = {"devices": [{"name": "fake", "uuid": "GPU-0", "total_bytes": 85899345920,
                       "reserved_bytes": 0, "used_bytes": [[0, 1 << 30], [600000, 70 << 30]],
                       "processes": [{"match": "children_of_caller", "used_bytes": 1 << 30}]}]}
tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "nvml.json"), "w") as f:
    json.dump(script, f)
env = dict(os.environ, OOMSCOPE_NVML_LIB=fake, OOMSCOPE_FAKE_NVML_SCRIPT=os.path.join(tmp, "nvml.json"))
for interval in intervals:
    trace = os.path.join(tmp, "t%d.oomt" % interval)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([collector, "run", "-q", "--interval-ms", str(interval), "-o", trace, "--",
                    "sleep", str(seconds)], env=env, check=True, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    size = os.path.getsize(trace)
    print("interval %d ms (%d Hz): wall %.1f s, collector CPU %.2f s = %.2f%% of one core, "
          "max RSS %.1f MiB (largest child so far), trace %d bytes = %.2f MiB/hour"
          % (interval, 1000 // interval, wall, cpu, 100 * cpu / wall, after.ru_maxrss / 1024,
             size, size / wall * 3600 / (1 << 20)), flush=True)
