"""GPU proof workload for the NVML check: holds a known amount of device memory and reads
nvidia-smi while holding it, between two stage marks, so the trace's readings at those marks can
be compared with nvidia-smi's in the same second.

usage: hold.py --bytes N --report PATH
"""

import argparse
import json
import os
import shutil
import subprocess
import time

import torch

import oomscope_probe as oom

GPU_FIELDS = ("index", "memory.total", "memory.used", "memory.free", "memory.reserved")


def smi(query, fields):
    """One nvidia-smi query as a list of dicts (values in MiB as nvidia-smi prints them)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-%s=%s" % (query, ",".join(fields)), "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True).stdout
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    held = torch.empty(args.bytes, dtype=torch.uint8, device=device)
    held.fill_(1)  # touch it: on the host, untouched pages are not resident
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(1.5)  # the collector reads per-process GPU memory once a second
    report = {"pid": os.getpid(), "device": device, "held_bytes": args.bytes, "nvidia_smi": None}
    oom.mark("smi_query")
    if shutil.which("nvidia-smi"):
        started = time.time()
        try:
            gpus = smi("gpu", GPU_FIELDS)
        except subprocess.CalledProcessError:  # older drivers lack memory.reserved
            gpus = smi("gpu", GPU_FIELDS[:-1])
        apps = smi("compute-apps", ("pid", "used_memory"))
        report["nvidia_smi"] = {"gpus": gpus, "apps": apps, "seconds": time.time() - started}
    oom.mark("smi_done")
    time.sleep(1.2)  # one more per-process reading by the collector
    oom.mark("smi_late")
    with open(args.report, "w") as f:
        json.dump(report, f)
    del held


if __name__ == "__main__":
    main()
