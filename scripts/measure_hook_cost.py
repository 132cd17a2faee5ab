"""What the zero-code hooks cost, as a user pays it: CPU time (user + system) of the whole process
tree of `collector run` (the program, its workers, the collector) with the hooks against
`collector run --no-python-hooks` (recording only), on the same program, pairs of runs
interleaved so that both see the same machine, at two step counts. The per-step cost is the
slope between them (what each step adds), the once cost what is left at the shorter run.

    python scripts/measure_hook_cost.py [--pairs 5] [--steps 500 3000] [--workers 0]
        [--program collector/tests/torch_programs/fast_loop.py] [--args "..."] [--collector PATH]
        [--together]

The program takes `--steps N` (fast_loop.py also `--workers N`); a compiled model:
`--program collector/tests/torch_programs/compiled_loop.py`.

Prints every run, then per step count the medians and the pairs' differences (hooks − no-hooks,
run back to back: what drifts between pairs on a shared host, 10-20% of a run, stays out), and
from the two step counts the hooks' cost per step and once, for the whole tree and for the
program alone (it reports its own CPU at exit; the rest is the collector's, and the program's
interpreter teardown). The figures go in BENCHMARKS.md ("Marks and hooks").
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prints the program's own CPU seconds (its process and its children) when it exits: the
# collector's is then the tree's less it.
SELF_CPU = """
import atexit, os, resource, runpy, sys
def said():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print("program-cpu %.4f" % (own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime),
          file=sys.stderr)
atexit.register(said)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(cmd, env):
    """(tree CPU seconds, program CPU seconds, wall seconds) of one run."""
    start = os.times()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    end = os.times()
    if proc.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), proc.stderr[-2000:]))
    tree = (end.children_user - start.children_user) + (end.children_system - start.children_system)
    program = next(float(l.split()[1]) for l in proc.stderr.splitlines()
                   if l.startswith("program-cpu "))
    return tree, program, end.elapsed - start.elapsed


def run_together(cmds, env):
    """Both commands at once, each pinned to a core of its own: both see the same machine at
    the same moments (the host's pace, other tenants), which run-after-run pairs cannot give.
    [(tree CPU seconds, program CPU seconds, wall seconds)] in the order given."""
    out = [None] * len(cmds)

    def one(i, cmd):
        t0 = time.monotonic()
        proc = subprocess.Popen(["taskset", "-c", str(i)] + cmd, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            out[i] = "failed: %s\n%s" % (" ".join(cmd), err[-2000:])
            return
        program = next(float(l.split()[1]) for l in err.splitlines()
                       if l.startswith("program-cpu "))
        out[i] = (usage.ru_utime + usage.ru_stime, program, time.monotonic() - t0)

    threads = [threading.Thread(target=one, args=(i, cmd)) for i, cmd in enumerate(cmds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in out:
        if isinstance(r, str):
            sys.exit(r)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, nargs=2, default=[500, 3000])
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader workers, for fast_loop.py (0 unless given)")
    p.add_argument("--program", default=os.path.join(ROOT, "collector/tests/torch_programs/fast_loop.py"))
    p.add_argument("--args", default="", help="more arguments for the program")
    p.add_argument("--collector", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "collector"))
    p.add_argument("--python", default=os.path.join(os.environ.get("OOMSCOPE_TORCH_VENV", ""),
                                                     "bin", "python"))
    p.add_argument("--together", action="store_true",
                   help="run each pair at once, one per core (two cores needed), not in turn")
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = tempfile.mkdtemp()
    wrapper = os.path.join(out, "self_cpu.py")
    with open(wrapper, "w") as f:
        f.write(SELF_CPU)
    results = {}
    for steps in a.steps:
        workers = a.workers
        if workers is None and os.path.basename(a.program) == "fast_loop.py":
            workers = 0
        prog = [a.python, wrapper, a.program, "--steps", str(steps)] + \
            (["--workers", str(workers)] if workers is not None else []) + a.args.split()
        for i in range(a.pairs):
            hows = ("no-hooks", "hooks") if i % 2 == 0 else ("hooks", "no-hooks")
            cmds = [[a.collector, "run", "-q"] + (["--no-python-hooks"] if how == "no-hooks"
                                                  else []) +
                    ["-o", os.path.join(out, how + ".oomt"), "--"] + prog for how in hows]
            if a.together:  # on cores 0 and 1, which swap every pair
                got = run_together(cmds, env)
            else:
                got = [run(cmd, env) for cmd in cmds]
            for how, (tree, program, wall) in zip(hows, got):
                results.setdefault((steps, how), []).append((tree, program, wall))
                print("%5d steps %-8s pair %d: tree %.3f s cpu (program %.3f, collector %.3f), "
                      "wall %.3f s" % (steps, how, i + 1, tree, program, tree - program, wall),
                      flush=True)
    # Each pair's difference (hooks − no-hooks, back to back or at once) leaves out what drifts
    # between pairs (the machine's pace on a shared host moves runs by 10-20%).
    short, long = a.steps
    diffs = {steps: [(h[0] - n[0], h[1] - n[1]) for n, h in zip(results[(steps, "no-hooks")],
                                                                  results[(steps, "hooks")])]
             for steps in a.steps}
    for steps in a.steps:
        n = [r[0] for r in results[(steps, "no-hooks")]]
        h = [r[0] for r in results[(steps, "hooks")]]
        d = sorted(x for x, _ in diffs[steps])
        print("%5d steps: tree cpu no-hooks median %.3f s (%.3f-%.3f), hooks %.3f s (%.3f-%.3f); "
              "hooks - no-hooks by pair: median %+.3f s, from %+.3f to %+.3f" % (
                  steps, statistics.median(n), min(n), max(n), statistics.median(h), min(h),
                  max(h), statistics.median(d), d[0], d[-1]))
    for k, what in ((0, "the whole tree"), (1, "the program")):
        at = {steps: statistics.median(d[k] for d in diffs[steps]) for steps in a.steps}
        per_step = (at[long] - at[short]) / (long - short)
        once = at[short] - per_step * short
        # The spread of the per-step figure: the long runs' quartiles of paired differences.
        q = statistics.quantiles([d[k] for d in diffs[long]], n=4) if len(diffs[long]) > 1 \
            else [at[long]] * 3
        print("hooks' cost, %s: %+.3f ms a step, %+.0f ms once (paired medians; the %d-step "
              "pairs' quartiles alone give %+.3f to %+.3f ms a step)" % (
                  what, per_step * 1e3, once * 1e3, long, (q[0] - at[short]) / (long - short) * 1e3,
                  (q[2] - at[short]) / (long - short) * 1e3))


if __name__ == "__main__":
    main()
