"""The notebook extension's cost (BENCHMARKS.md, "Notebooks"): per cell run and per training step,
in a real Jupyter kernel, with `%load_ext oomscope` against the same kernel without it.

    python scripts/measure_notebook.py COLLECTOR [--rounds 5]

Run with the PyTorch venv's Python (ipykernel and jupyter_client from scripts/setup-frameworks.sh)
and PYTHONPATH=collector/python. Each round starts two fresh kernels, one plain and one with the
extension, and times in each (inside the kernel, `time.perf_counter`) 200 cell runs of `pass`,
timed from the client (request to reply), and 300 steps of a small MLP's training loop on CPU
(the hooks mark every step). Prints the medians over rounds.
"""

import argparse
import os
import statistics
import tempfile
import time

from jupyter_client.manager import start_new_kernel

CELLS = 200
SETUP = """import time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(32, 256)"""
STEPS = 300
TRAIN = """t0 = time.perf_counter()
for _ in range(%d):
    loss = m(x).pow(2).mean(); loss.backward(); opt.step(); opt.zero_grad()
print((time.perf_counter() - t0) / %d * 1e6)""" % (STEPS, STEPS)


def run(kc, code):
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise RuntimeError(msg["content"]["evalue"])

    kc.execute_interactive(code, output_hook=hook, timeout=300)
    return "".join(out)


def one(extension, workdir):
    km, kc = start_new_kernel(kernel_name="python3", cwd=workdir)
    try:
        if extension:
            run(kc, "%load_ext oomscope")
        run(kc, SETUP)
        # The cells after torch's import: the hooks are in (with the extension).
        run(kc, "pass")
        t0 = time.perf_counter()
        for _ in range(CELLS):
            run(kc, "pass")
        per_cell_us = (time.perf_counter() - t0) / CELLS * 1e6
        run(kc, TRAIN)  # warm
        per_step_us = float(run(kc, TRAIN))
        if extension:
            run(kc, "%unload_ext oomscope")
        return per_cell_us, per_step_us
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("collector")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    os.environ["OOMSCOPE_COLLECTOR"] = os.path.abspath(a.collector)
    workdir = tempfile.mkdtemp(prefix="oomscope-measure-notebook-")
    os.environ["OOMSCOPE_TRACE"] = os.path.join(workdir, "kernel.oomt")
    got = {False: [], True: []}
    for _ in range(a.rounds):
        for extension in (False, True):
            got[extension].append(one(extension, workdir))
    for extension in (False, True):
        cells = statistics.median(c for c, _ in got[extension])
        steps = statistics.median(s for _, s in got[extension])
        print("%-16s cell run %7.0f us   training step %7.0f us" % (
            "with extension" if extension else "plain kernel", cells, steps))
    plain, ext = got[False], got[True]
    print("cost: %+.0f us a cell run, %+.0f us a step" % (
        statistics.median(c for c, _ in ext) - statistics.median(c for c, _ in plain),
        statistics.median(s for _, s in ext) - statistics.median(s for _, s in plain)))


if __name__ == "__main__":
    main()
