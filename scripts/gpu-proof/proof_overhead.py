"""The GPU proof's checks of cost: step time with and without the collector (between processes,
and inside one process with the collector frozen and thawed or the instrumentation on and off in
turns), the collector's own CPU while it watches an idle program, and the costs of NVML calls and
allocator snapshots; with the statistics they share. Its own file so that proof.py (the harness and
command line) reads in one sitting; the methods are mixed into proof.Proof.
"""

import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time


class OverheadChecks:
    """Check 5 of the proof (see the module's docstring); a mixin of proof.Proof."""

    # ---- 5. overhead -----------------------------------------------------------------------

    def check_overhead(self):
        pairs, steps = (self.args.pairs, 200) if self.cuda["cuda"] else (2, 10)
        model = ["--d-model", "512", "--layers", "4", "--heads", "8", "--seq-len", "512", "--batch", "16",
                 "--vocab", "8192"] if self.cuda["cuda"] else []
        base = self.gpt("--steps", str(steps), "--eval-every", "0", *model)
        ms = lambda text: float(re.search(r"\(([0-9.]+) ms/step\)", text).group(1))
        under = lambda cmd: [self.exe("collector"), "run", "-q", "-o", os.path.join(self.work, "overhead.oomt"), "--", *cmd]
        # What each part costs: marks only (no statistics), marks + gradient statistics, everything.
        # On an H100 the marks-only run cost as much as the full one (2%): is it the collector's
        # NVML readings (driver locks shared with the training process) or the marks themselves?
        no_nvml = {"OOMSCOPE_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"}
        parts = {"marks_only": (under(base + ["--grad-stats-every", "0", "--tensor-stats-every", "0"]), {}),
                 "marks_and_gradients": (under(base + ["--tensor-stats-every", "0"]), {}),
                 "collector_without_nvml": (under(base), no_nvml),
                 "collector_at_1_hz": (under(base)[:2] + ["--interval-ms", "1000"] + under(base)[2:], {})}
        off, on, part_ms = [], [], {k: [] for k in parts}
        for i in range(pairs):
            _, out, _ = self.run(base, check=True)
            off.append(ms(out))
            _, out, _ = self.run(under(base), check=True)
            on.append(ms(out))
            for k, (cmd, env) in parts.items():
                if i < 3:
                    part_ms[k].append(ms(self.run(cmd, check=True, env=env)[1]))
        diffs = [(b - a) / a * 100 for a, b in zip(off, on)]
        mean = statistics.mean(diffs)
        half = t95(len(diffs)) * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("inf")
        figures = {"model": " ".join(model) or "default", "steps": steps, "pairs": pairs,
                   "off_ms_per_step": off, "on_ms_per_step": on,
                   "median_off_ms": statistics.median(off), "median_on_ms": statistics.median(on),
                   "overhead_percent_mean": round(mean, 3), "ci95_percent": [round(mean - half, 3), round(mean + half, 3)],
                   "parts_median_ms": {k: statistics.median(v) for k, v in part_ms.items() if v}}
        figures["snapshot"] = self.snapshot_cost()
        figures["nvml_calls"] = self.nvml_call_cost()
        # Separate processes differ by about ±1.5% in step time on an H100 (GPU clocks, memory
        # placement), which 12 pairs cannot resolve below ~1%: the step-time target is judged
        # inside one process (overhead_windows, instrumentation_ab); these figures stay as the
        # end-to-end picture.
        return figures, None, "", ("between-process figures, not judged: overhead_windows and "
                                   "instrumentation_ab measure the cost inside one process")

    def check_sampler(self):
        """The collector's own CPU while it watches an idle program (see sampler_cpu)."""
        figures = self.sampler_cpu()
        if not self.cuda["cuda"]:
            return figures, None, "", "judged with the real driver (dry run: the fake NVML)"
        # NVML's own cost is the driver's: measured here as the difference with and without it
        # (a cold call per tick costs ~23 us on an H200, not the 7 us of a hot loop).
        figures["nvml_share_at_1000_percent"] = round(
            figures["1000"]["cpu_percent"] - figures["1000_without_nvml"]["cpu_percent"], 3)
        ok = figures["100"]["cpu_percent"] <= 1.0 and figures["1000_without_nvml"]["cpu_percent"] <= 3.0
        return figures, ok, ("sampler <= 1% of a core at 100 Hz (with NVML); at 1 kHz <= 3% without NVML, "
                             "NVML's share beside it"), None

    def check_overhead_windows(self):
        """The collector's cost inside ONE training process: the collector is frozen (SIGSTOP)
        and thawed (SIGCONT) every few seconds while the GPT example trains, and step times in
        thawed windows are compared with the frozen windows next to them. Between-process noise
        (GPU clocks, memory placement: ±1.5% between runs on an H100) cancels; what is left is the
        sampler's and recorder's effect on the training loop. The marks are sent in both kinds
        of window (a frozen collector's socket fills up and the sends fail without blocking),
        so their cost is not in this figure; it is the marks-only part of check_overhead."""
        steps, window_s = (2000, 2.0) if self.cuda["cuda"] else (60, 0.5)
        model = ["--d-model", "512", "--layers", "4", "--heads", "8", "--seq-len", "512", "--batch", "16",
                 "--vocab", "8192"] if self.cuda["cuda"] else []
        figures = {"model": " ".join(model) or "default", "steps": steps, "window_s": window_s}
        no_nvml = {"OOMSCOPE_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"}
        variants = (("default", {}, "10"), ("without_nvml", no_nvml, "10"), ("at_20_hz", {}, "50"))
        # The dry run proves the harness, and the default run judges: one variant is enough there.
        for name, env, interval in variants if self.cuda["cuda"] and self.args.full else variants[:1]:
            times = os.path.join(self.work, "step_times_%s.txt" % name)
            cmd = [self.exe("collector"), "run", "-q", "--interval-ms", interval,
                   "-o", os.path.join(self.work, "windows.oomt"), "--",
                   *self.gpt("--steps", str(steps), "--eval-every", "0", "--step-times", times, *model)]
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=dict(self.env, **env))
            windows, running = [], True
            try:
                while p.poll() is None:
                    start = time.time()
                    time.sleep(window_s)
                    windows.append((start, time.time(), running))
                    running = not running
                    os.kill(p.pid, signal.SIGCONT if running else signal.SIGSTOP)
            finally:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.wait(timeout=120)
            steps_at = [tuple(int(v) for v in line.split()) for line in open(times)]
            # Each window's median step time, leaving out steps within 0.1 s of a switch.
            medians = []
            for start, end, on in windows:
                inside = [took / 1e6 for end_ns, took, *_ in steps_at
                          if start + 0.1 < end_ns / 1e9 - took / 1e9 and end_ns / 1e9 < end - 0.1]
                if len(inside) >= 5:
                    medians.append((on, statistics.median(inside)))
            # Pairs of neighbouring windows, thawed against frozen.
            figures[name] = dict(windows=len(medians), **neighbour_pairs(medians, "on", "off"))
        if not self.cuda["cuda"]:
            return figures, None, "", "the step-time target is for GPU steps (dry run: measured on CPU, not judged)"
        upper = figures["default"]["ci95_percent"][1]
        return figures, upper <= 0.5, "the collector's in-process step-time cost: 95% upper bound <= 0.5%", None

    def check_instrumentation_ab(self):
        """What the program-side instrumentation costs (the tch Session's marks with allocator
        snapshots, the asynchronous gradient summary every step, the logits' statistics every 10
        steps), inside ONE process under the collector: the GPT example instruments only every
        other block of 25 steps, and each block's median step time is compared with its
        neighbours'. Together with check_overhead_windows (the collector's own cost) this is the
        whole overhead, free of the ±1.5% that separate runs differ by."""
        steps, block = (2000, 25) if self.cuda["cuda"] else (100, 5)
        model = ["--d-model", "512", "--layers", "4", "--heads", "8", "--seq-len", "512", "--batch", "16",
                 "--vocab", "8192"] if self.cuda["cuda"] else []
        figures = {"model": " ".join(model) or "default", "steps": steps, "block_steps": block}
        variants = (("default", []), ("marks_only", ["--grad-stats-every", "0", "--tensor-stats-every", "0"]))
        for name, extra in variants if self.cuda["cuda"] and self.args.full else variants[:1]:
            times = os.path.join(self.work, "ab_%s.txt" % name)
            self.run([self.exe("collector"), "run", "-q", "-o", os.path.join(self.work, "ab.oomt"), "--",
                      *self.gpt("--steps", str(steps), "--eval-every", "0", "--step-times", times,
                                "--instrument-alternately", str(block), *extra, *model)], check=True)
            rows = [tuple(int(v) for v in line.split()) for line in open(times)]
            blocks = []
            for b in range(len(rows) // block):
                chunk = rows[b * block:(b + 1) * block][2:]  # the first steps of a block settle
                blocks.append((bool(chunk[0][2]), statistics.median(took / 1e6 for _, took, _ in chunk)))
            blocks = blocks[2:]  # warm-up
            figures[name] = neighbour_pairs(blocks, "instrumented", "plain")
        if not self.cuda["cuda"]:
            return figures, None, "", "the step-time target is for GPU steps (dry run: measured on CPU, not judged)"
        upper = figures["default"]["ci95_percent"][1]
        return figures, upper <= 0.5, "the instrumentation's in-process step-time cost: 95% upper bound <= 0.5%", None

    def sampler_cpu(self):
        """Collector CPU while watching an idle program: the time its threads spent on a CPU
        (`/proc/<pid>/task/*/schedstat`, nanoseconds from the scheduler) between two readings
        of one run, so that start-up (NVML's init, the first process scan) does not count. The
        rusage of a finished child is tick-sampled on many kernels, and a collector waking on a
        timer aligned with the tick is over-counted by it (the first H100 runs read 1.1% and 2.3%
        at 100 Hz for the same binary). At 1 kHz also without NVML (host memory only), which
        separates the driver's share."""
        first, last = (3, 13) if self.cuda["cuda"] else (0.5, 1.5)
        result = {}
        for name, interval, env in (("100", 10, {}), ("1000", 1, {}),
                                    ("1000_without_nvml", 1, {"OOMSCOPE_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"})):
            cmd = [self.exe("collector"), "run", "-q", "--interval-ms", str(interval), "-o",
                   os.path.join(self.work, "idle.oomt"), "--", "sleep", str(last + 2)]
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=dict(self.env, **env))
            start = time.monotonic()
            readings = {}
            for at in (first, last):
                time.sleep(max(0.0, start + at - time.monotonic()))
                readings[at] = (time.monotonic(), on_cpu_seconds(p.pid))
            p.wait(timeout=60)
            (t0, c0), (t1, c1) = readings[first], readings[last]
            result[name] = {"cpu_s": round(c1 - c0, 4), "over_s": round(t1 - t0, 3),
                            "cpu_percent": round(100 * (c1 - c0) / (t1 - t0), 3)}
        return result

    def nvml_call_cost(self):
        """The real driver's cost of the two NVML calls the collector makes (through ctypes)."""
        if self.dry:
            return "fake NVML (dry run): not measured"
        code = r"""
import ctypes, json, time
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
class Memory2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
class Process(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
m = Memory2(); m.version = ctypes.sizeof(Memory2) | (2 << 24)
n = 5000; t = time.perf_counter()
for _ in range(n): lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m))
memory = (time.perf_counter() - t) / n * 1e6
procs = (Process * 64)(); count = ctypes.c_uint(64)
n2 = 200; t = time.perf_counter()
for _ in range(n2):
    count.value = 64; lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), procs)
processes = (time.perf_counter() - t) / n2 * 1e6
print(json.dumps({"memory_info_v2_us": memory, "compute_running_processes_v3_us": processes}))
"""
        return json.loads(self.run([sys.executable, "-c", code], check=True)[1])

    def snapshot_cost(self):
        _, out, _ = self.run(self.gpt("--time-snapshots", "20000", "--steps", "0"), check=True)
        tch = json.loads(next(l for l in out.splitlines() if '"snapshot_cost"' in l))
        code = ("import json, time, torch\nc = torch.cuda.is_available()\n"
                "torch.zeros(1, device='cuda') if c else None\nn = 20000\nt = time.perf_counter()\n"
                "for _ in range(n):\n    torch.cuda.memory_stats() if c else None\n"
                "flat = (time.perf_counter() - t) / n * 1e6\nt = time.perf_counter()\n"
                "for _ in range(n):\n    torch.cuda.memory_stats_as_nested_dict() if c else None\n"
                "nested = (time.perf_counter() - t) / n * 1e6\n"
                "print(json.dumps({'cuda': c, 'us_per_memory_stats': flat, 'us_per_memory_stats_as_nested_dict': nested}))")
        _, out, _ = self.run([sys.executable, "-c", code], check=True)
        return {"tch_shim": tch, "python_memory_stats": json.loads(out)}


def neighbour_pairs(periods, on_name, off_name):
    """Step-time cost from alternating periods of one process: `periods` is [(on, median ms)] in
    time order; each neighbouring on/off pair gives (on − off) / off in percent. Returns the pair
    count, the medians of each kind, the mean and its 95% interval."""
    diffs = []
    for (a_on, a), (b_on, b) in zip(periods, periods[1:]):
        if a_on != b_on:
            on_ms, off_ms = (a, b) if a_on else (b, a)
            diffs.append((on_ms - off_ms) / off_ms * 100)
    mean = statistics.mean(diffs) if diffs else float("nan")
    half = t95(len(diffs)) * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("inf")
    median = lambda values: statistics.median(values) if values else float("nan")
    return {"pairs": len(diffs),
            "median_%s_ms" % on_name: median([m for on, m in periods if on]),
            "median_%s_ms" % off_name: median([m for on, m in periods if not on]),
            "overhead_percent_mean": round(mean, 3),
            "ci95_percent": [round(mean - half, 3), round(mean + half, 3)]}


def on_cpu_seconds(pid):
    """Seconds the threads of `pid` have run on a CPU (the first field of each schedstat)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended between the listing and the read
    return total / 1e9


def t95(n):
    """Two-sided 95% Student t quantile for n paired samples (n − 1 degrees of freedom)."""
    table = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262,
             11: 2.228, 12: 2.201, 13: 2.179, 14: 2.160, 15: 2.145, 16: 2.131, 17: 2.120, 18: 2.110, 19: 2.101,
             20: 2.093}
    return table.get(n, 2.04)

