#!/usr/bin/env python3
"""The GPU proof (issue 11): runs oomscope's GPU paths on a real GPU and compares every figure
with an independent source (nvidia-smi, PyTorch's own counters and error texts, a plain scan),
each against a stated tolerance. Writes `gpu-proof.json` (and the traces it recorded) into --out.

It runs from the folder `scripts/gpu-proof.sh` packs: `bin/` (collector, the tch GPT example),
`py/` (these scripts and the oomscope_probe helper). With --dry-run it runs the same workloads on
CPU with the fake NVML library, so CI proves the harness builds, packs, runs and writes its JSON;
the assertions that need a GPU are skipped there with the reason.

The checks live beside this file: proof_accuracy.py (each figure against an independent source)
and proof_overhead.py (what the collector and the instrumentation cost); this file is the harness
(running a command, recording under the collector, the JSON) and the command line.

usage: proof.py --pack DIR --out DIR [--dry-run] [--only ID,ID]
"""

import argparse
import csv
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from proof_accuracy import GIB, AccuracyChecks
from proof_overhead import OverheadChecks


class Skip(Exception):
    """A check (or part of one) that cannot run here; the reason goes into the JSON."""


class Proof(AccuracyChecks, OverheadChecks):
    def __init__(self, args):
        self.args = args
        self.pack = os.path.abspath(args.pack)
        self.out = os.path.abspath(args.out)
        self.dry = args.dry_run
        self.bin = os.path.join(self.pack, "bin")
        self.py = os.path.join(self.pack, "py")
        self.work = tempfile.mkdtemp(prefix="oomscope-proof-")
        self.env = dict(os.environ, PYTHONPATH=self.py + os.pathsep + os.environ.get("PYTHONPATH", ""),
                        PYTHONUNBUFFERED="1")
        if self.dry:
            self.env.update(self.fake_nvml())
        self.cuda = self.python_probe()
        self.results = {
            "dry_run": self.dry,
            "started_unix": time.time(),
            "host": platform.node(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "torch": self.cuda.get("torch"),
            "device": self.cuda.get("device"),
            "nvidia_smi": self.smi_overview(),
            "checks": [],
        }

    # ---- plumbing -------------------------------------------------------------------------

    def fake_nvml(self):
        """The fake NVML library (dry run): one 80 GiB device whose use stays at 1 GiB."""
        lib = os.path.join(self.bin, "libfake_nvml.so")
        script = os.path.join(self.work, "nvml.json")
        with open(script, "w") as f:
            json.dump({"devices": [{"name": "fake", "uuid": "GPU-0", "total_bytes": 80 * GIB,
                                    "reserved_bytes": 0, "used_bytes": [[0, GIB]],
                                    "processes": [{"match": "children_of_caller", "used_bytes": GIB}]}]}, f)
        return {"OOMSCOPE_NVML_LIB": lib, "OOMSCOPE_FAKE_NVML_SCRIPT": script}

    def python_probe(self):
        code = ("import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
                "'cuda': c, 'device': torch.cuda.get_device_name(0) if c else 'cpu', "
                "'total_bytes': torch.cuda.mem_get_info()[1] if c else None}))")
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                             env=self.env).stdout
        return json.loads(out)

    def smi_overview(self):
        if not shutil.which("nvidia-smi"):
            return None
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout
        return out.strip()

    def exe(self, name):
        return os.path.join(self.bin, name)

    def run(self, cmd, timeout=240, check=False, env=None):
        """Runs a command (with `env` added to the proof's environment); returns (exit code,
        stdout, stderr). A failing command's stderr goes to the log whole (the JSON keeps its end)."""
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(self.env, **(env or {})),
                           timeout=timeout)
        if p.returncode != 0:
            print("[gpu-proof] exit %d: %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-6000:]), flush=True)
        if check and p.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
        return p.returncode, p.stdout, p.stderr

    def record(self, name, cmd, extra=(), timeout=240, hooks=False, env=None):
        """`collector run` around cmd; returns (trace path, exit code, stdout, stderr). The zero-code
        hooks are off unless asked for: the other checks compare the helper's marks one by one."""
        trace = os.path.join(self.work, name + ".oomt")
        off = () if hooks else ("--no-python-hooks",)
        code, out, err = self.run([self.exe("collector"), "run", "-q", "-o", trace, *off, *extra, "--", *cmd],
                                  timeout=timeout, env=env)
        return trace, code, out, err

    def keep(self, trace, name):
        """Copies a recorded trace into --out (the report screenshot is made from these)."""
        shutil.copy(trace, os.path.join(self.out, name))

    def rows(self, trace):
        """The trace as `collector export --format csv` rows."""
        _, out, _ = self.run([self.exe("collector"), "export", trace, "--format", "csv"], check=True)
        return list(csv.DictReader(io.StringIO(out)))

    def marks(self, trace):
        return [r for r in self.rows(trace) if r["kind"] == "mark"]

    def summary(self, trace):
        _, out, _ = self.run([self.exe("collector"), "summary", trace, "--json"], check=True)
        return json.loads(out)["analysis"]

    def gpt(self, *args):
        return [self.exe("gpt"), "--trace", "none", "--device", "cuda" if self.cuda["cuda"] else "cpu", *args]

    def need_cuda(self, what):
        if not self.cuda["cuda"]:
            raise Skip("%s needs a CUDA device (this run: %s)" % (what, "dry run on CPU" if self.dry else "no CUDA"))

    def save(self):
        self.results["finished_unix"] = time.time()
        counts = {}
        for c in self.results["checks"]:
            counts[c["status"]] = counts.get(c["status"], 0) + 1
        self.results["counts"] = counts
        with open(os.path.join(self.out, "gpu-proof.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)

    def check(self, cid, title, fn):
        started = time.monotonic()
        entry = {"id": cid, "title": title}
        try:
            figures, passed, tolerance, skipped = fn()
            entry.update(figures=figures, tolerance=tolerance)
            if passed is None:
                entry.update(status="skip", reason=skipped)
            else:
                entry["status"] = "pass" if passed else "fail"
                if skipped:
                    entry["skipped_parts"] = skipped
        except Skip as s:
            entry.update(status="skip", reason=str(s))
        except Exception as e:  # the harness reports, it never stops half way
            entry.update(status="error", reason="%s: %s" % (type(e).__name__, e), traceback=traceback.format_exc())
        entry["seconds"] = round(time.monotonic() - started, 2)
        self.results["checks"].append(entry)
        self.save()
        print("[gpu-proof] %-22s %-5s %5.1f s  %s" % (cid, entry["status"], entry["seconds"],
                                                      entry.get("reason", entry.get("tolerance", ""))), flush=True)


CHECKS = (
    ("nvml", "NVML readings equal nvidia-smi in the same second", Proof.check_nvml),
    ("allocator_torch", "Allocator truth: a plain PyTorch loop's marks equal torch.cuda.memory_stats()", Proof.check_allocator_torch),
    ("allocator_tch", "Allocator truth: the tch GPT example's marks equal libtorch's counters", Proof.check_allocator_tch),
    ("oom_torch", "A real CUDA OOM in a PyTorch loop, recognised from its error text", Proof.check_oom_torch),
    ("oom_tch", "A real CUDA OOM in the tch GPT example, seen by the allocator's OOM observer", Proof.check_oom_tch),
    ("zero_code", "An unmodified PyTorch program under the zero-code hooks: marks, a real OOM, what was alive",
     Proof.check_zero_code),
    ("breakdown", "What the memory is: the zero-code breakdown against torch's own counts", Proof.check_breakdown),
    ("held", "What holds a leak: the hooks' counts of live tensors name the list", Proof.check_held),
    ("inputs", "A rare long batch: the input-driven peak named, not a leak", Proof.check_inputs),
    ("ranks", "torchrun with two ranks: each rank's own GPU memory", Proof.check_ranks),
    ("batch", "Batch finder against a plain scan", Proof.check_batch),
    ("overhead", "Overhead between processes: step time with and without the collector, snapshot and NVML costs",
     Proof.check_overhead),
    ("sampler", "The collector's CPU while it watches an idle program, at 100 Hz and 1 kHz", Proof.check_sampler),
    ("overhead_windows", "Overhead inside one training process: the collector frozen and thawed in turns",
     Proof.check_overhead_windows),
    ("instrumentation_ab", "Overhead inside one training process: the loop instrumented in every other block",
     Proof.check_instrumentation_ab),
)


# Run only with --full (or --only): figures that are not judged, worth their device time only
# when the overhead itself is the question (158 s on an H200).
FULL_ONLY = {"overhead"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", required=True, help="the folder scripts/gpu-proof.sh packed")
    ap.add_argument("--out", required=True, help="where gpu-proof.json and the traces go")
    ap.add_argument("--dry-run", action="store_true", help="CPU and the fake NVML: prove the harness")
    ap.add_argument("--only", default="", help="comma-separated check ids")
    ap.add_argument("--pairs", type=int, default=5, help="alternating off/on pairs of the overhead check")
    ap.add_argument("--full", action="store_true",
                    help="also the between-process overhead check (not judged) and every variant of the "
                         "in-process ones; without it the proof fits one 10-minute device call")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    proof = Proof(args)
    if not proof.dry and not proof.cuda["cuda"]:
        print("[gpu-proof] no CUDA device: run with --dry-run on a machine without a GPU", file=sys.stderr)
        return 2
    only = set(filter(None, args.only.split(",")))
    print("[gpu-proof] %s, torch %s%s" % (proof.results["device"], proof.results["torch"],
                                          " (dry run)" if proof.dry else ""), flush=True)
    for cid, title, fn in CHECKS:
        # The dry run proves every check's harness.
        if (not only and (args.full or proof.dry or cid not in FULL_ONLY)) or cid in only:
            proof.check(cid, title, lambda fn=fn: fn(proof))
    proof.save()
    counts = proof.results["counts"]
    print("[gpu-proof] %s -> %s" % (", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())),
                                     os.path.join(args.out, "gpu-proof.json")), flush=True)
    return 1 if counts.get("error") or counts.get("fail") else 0


if __name__ == "__main__":
    sys.exit(main())
