"""What the zero-code hooks cost each program as a user runs it (issue 59's cost table): the CPU
time (user + system) of the whole tree of `collector run -- python PROGRAM` against
`collector run --no-python-hooks -- python PROGRAM`, on the same program, in pairs run back to back
(the order alternating) so that both halves of a pair see the same machine. The figure per program
is the median of the pairs' ratios (hooks / no hooks); the spread is the pairs' lowest and highest.

    python3 scripts/measure_program_cost.py [--pairs 3] [--collector PATH] [--python PATH]
        [--json OUT] PROGRAM_OR_DIR ...

A directory stands for its programs (`*.py`, not those starting with `_`). Each program runs in
its own folder with `ZOO_TRUTH` pointed at a scratch file and its `EXPECT`'s `env` set, as
`scripts/zoo.py` and `scripts/fresh.py` run it; a program whose `EXPECT` asks for a memory cgroup,
a small `/dev/shm` or an exit other than 0 is `skipped` (without its cgroup a program written to be
killed would fill the host), and so is one that fails. The figures go in
BENCHMARKS.md ("Marks and the zero-code hooks")."""

import argparse
import ast
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree_cpu(argv, cwd, env):
    """The CPU seconds of `argv` and every process it waited for, and its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ran = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, ran.returncode


def programs(paths):
    for p in paths:
        if os.path.isdir(p):
            yield from sorted(f for f in glob.glob(os.path.join(p, "*.py"))
                              if not os.path.basename(f).startswith("_"))
        else:
            yield p


def expectations(program):
    """The `EXPECT = {...}` literal in a program's docstring ({} without one)."""
    with open(program) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    at = doc.find("EXPECT =")
    return ast.literal_eval(doc[at + len("EXPECT ="):].strip()) if at >= 0 else {}


def measure(program, collector, python, pairs, scratch):
    name = os.path.splitext(os.path.basename(program))[0]
    expect = expectations(program)
    needs = [k for k in ("cgroup_mib", "shm_mib", "killed", "exit_code") if k in expect]
    if needs:
        return {"program": name, "skipped": "needs " + ", ".join(needs)}
    env = dict(os.environ, ZOO_TRUTH=os.path.join(scratch, name + ".truth.json"),
               OMP_NUM_THREADS="1", **expect.get("env", {}))
    trace = os.path.join(scratch, name + ".oomt")
    on = [collector, "run", "-q", "-o", trace, "--", python, os.path.basename(program)]
    off = [collector, "run", "-q", "--no-python-hooks", "-o", trace, "--", python,
           os.path.basename(program)]
    ratios, cpus_on, cpus_off = [], [], []
    for i in range(pairs):
        order = [(True, on), (False, off)] if i % 2 == 0 else [(False, off), (True, on)]
        got = {}
        for hooks, argv in order:
            cpu, rc = tree_cpu(argv, os.path.dirname(os.path.abspath(program)), env)
            if rc != 0:
                return {"program": name, "skipped": "exit %d %s hooks" % (rc, "with" if hooks
                                                                           else "without")}
            got[hooks] = cpu
        cpus_on.append(got[True])
        cpus_off.append(got[False])
        ratios.append(got[True] / got[False])
    return {"program": name, "pairs": pairs, "ratio_median": statistics.median(ratios),
            "ratio_low": min(ratios), "ratio_high": max(ratios),
            "cpu_on_s": statistics.median(cpus_on), "cpu_off_s": statistics.median(cpus_off)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--collector", default=os.environ.get("COLLECTOR") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "collector"))
    venv = os.environ.get("OOMSCOPE_TORCH_VENV", "")
    p.add_argument("--python", default=os.environ.get("PYTHON") or (
        os.path.join(venv, "bin", "python") if venv else sys.executable))
    p.add_argument("--json", default=None, help="write every row to this file")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for program in programs(a.paths):
            start = time.monotonic()
            row = measure(program, a.collector, a.python, a.pairs, scratch)
            rows.append(row)
            if "skipped" in row:
                print("%-36s skipped: %s" % (row["program"], row["skipped"]), flush=True)
            else:
                print("%-36s %+6.1f%%  (pairs %.3f-%.3f; %.2f / %.2f s CPU; %.0f s)" % (
                    row["program"], 100 * (row["ratio_median"] - 1), row["ratio_low"],
                    row["ratio_high"], row["cpu_on_s"], row["cpu_off_s"],
                    time.monotonic() - start), flush=True)
    measured = [r for r in rows if "skipped" not in r]
    if measured:
        worst = max(measured, key=lambda r: r["ratio_median"])
        print("%d programs measured, %d skipped; median of medians %+.1f%%, worst %s %+.1f%%" % (
            len(measured), len(rows) - len(measured),
            100 * (statistics.median(r["ratio_median"] for r in measured) - 1),
            worst["program"], 100 * (worst["ratio_median"] - 1)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
