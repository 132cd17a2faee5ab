#!/usr/bin/env python3
"""The pattern zoo's scorecard: every program in `collector/tests/zoo/` run under
`collector run`, its summary (text and JSON) held against what the program expects and what it
measured of itself, and one line per program: right, partial or wrong.

A program says what it expects in its docstring, as `EXPECT = {...}` (a Python literal):
- `findings`: finding ids that must be there; `absent`: ids that must not (a false finding);
- `words` / `no_words`: phrases the text summary must / must not contain;
- `evals`: how many evals the run had (the eval table's count, from the JSON);
- `rate_per`: the clock a leak's rate is said in (`step`, `request`, `epoch`): the leak
  finding's rate must be within a third (or the program's `rate_tolerance`) of the program's own
  `kept_bytes_per_<clock>`, and what its holders gain within a third of the program's
  `held_bytes_per_<clock>` when the program measures that;
- `cgroup_mib`: run it inside a memory cgroup of that limit (root and a writable memory
  controller; else the program is `skipped`, with why); `killed`: the kernel kills it (exit 137);
- `shm_mib`: run it with a `/dev/shm` of that size, as in a container (a tmpfs mounted in a mount
  namespace of its own: `unshare -m`, root; else `skipped`); `exit_code`: the exit it must end
  with (0 otherwise);
- `env`: variables set in the program's environment (e.g. `OOMSCOPE_MARK_INTERVAL_MS`);
- `thinned`: a leak fit read the stage's marks thinned (more than 4 096 a stage:
  `steps_per_point` above 1), as the program was written to;
- `run_up_per_batch`: the fatal OOM's run-up (`analysis.run_up`) names what grew in the eval at
  within a third of the program's own `kept_bytes_per_batch`.
What the program measured of itself (its storages' bytes, its step count) comes from the JSON
file `ZOO_TRUTH` names, written by `collector/tests/zoo/_truth.py`.

Each threshold the analysis decides by is measured on every program it decides, as a ratio to
it, and must sit clear of it (`scripts/zoo_thresholds.py`: where each was set, how it is checked).

Verdicts: wrong when a finding it must have is missing or one it must not have is there;
partial when the findings are right but words, counts or rates are not; right otherwise.

Usage: python3 scripts/zoo.py [--json] [--only NAME[,NAME]] [--keep DIR]
Needs the release collector ($CARGO_TARGET_DIR/release/collector, or COLLECTOR) and a Python
with torch (OOMSCOPE_TORCH_VENV, or PYTHON)."""

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import zoo_thresholds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "collector", "tests", "zoo")
RATE_TOLERANCE = 1 / 3


def programs(only):
    names = sorted(f[:-3] for f in os.listdir(ZOO) if f.endswith(".py") and not f.startswith("_"))
    return [n for n in names if not only or n in only]


def expectations(name):
    """The `EXPECT = {...}` literal in a program's docstring."""
    with open(os.path.join(ZOO, name + ".py")) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    at = doc.find("EXPECT =")
    if at < 0:
        raise SystemExit("zoo: %s.py has no EXPECT in its docstring" % name)
    return ast.literal_eval(doc[at + len("EXPECT ="):].strip())


def tools():
    collector = os.environ.get("COLLECTOR") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "collector")
    venv = os.environ.get("OOMSCOPE_TORCH_VENV")
    python = os.environ.get("PYTHON") or (
        os.path.join(venv, "bin", "python") if venv else "python3")
    return collector, python


class Cgroup:
    """A memory cgroup of `limit` bytes under this process's own (cgroup v1, or v2 with the memory
    controller delegated), removed on exit; `why` says why there is none."""

    def __init__(self, name, limit):
        self.dir, self.why = None, None
        if os.geteuid() != 0:
            self.why = "not root: cannot make a memory cgroup"
            return
        with open("/proc/self/cgroup") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
        v1 = next((path for _, controllers, path in own
                   if "memory" in controllers.split(",")), None)
        if v1 is not None:
            parent, limit_file = "/sys/fs/cgroup/memory" + v1, "memory.limit_in_bytes"
        else:
            path = next((path for _, c, path in own if c == ""), None)
            parent, limit_file = "/sys/fs/cgroup" + (path or ""), "memory.max"
            try:
                with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                    delegated = "memory" in f.read().split()
            except OSError:
                delegated = False
            if path is None or not delegated:
                self.why = "no memory controller this process can write"
                return
        d = os.path.join(parent.rstrip("/"), "oomscope-zoo-%s-%d" % (name, os.getpid()))
        try:
            os.mkdir(d)
            with open(os.path.join(d, limit_file), "w") as f:
                f.write(str(limit))
        except OSError as e:
            self.why = "cannot make %s: %s" % (d, e)
            return
        self.dir = d
        try:
            with open(os.path.join(d, "memory.swap.max"), "w") as f:
                f.write("0")
        except OSError:
            pass

    def command(self, argv):
        """`argv` started inside the cgroup (a shell joins it, then becomes the command)."""
        return ["sh", "-c", 'echo $$ > %s/cgroup.procs && exec "$@"' % self.dir, "sh"] + argv

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def run_one(name, collector, python, out_dir):
    trace = os.path.join(out_dir, name + ".oomt")
    truth_path = os.path.join(out_dir, name + ".truth.json")
    expect = expectations(name)
    env = dict(os.environ, ZOO_TRUTH=truth_path, **expect.get("env", {}))
    argv = [collector, "run", "-q", "-o", trace, "--", python, name + ".py"]
    cgroup = None
    if "cgroup_mib" in expect:
        cgroup = Cgroup(name, expect["cgroup_mib"] << 20)
        if cgroup.dir is None:
            return {"verdict": "skipped", "why": [cgroup.why], "seconds": 0.0}
        argv = cgroup.command(argv)
    if "shm_mib" in expect:
        if os.geteuid() != 0 or not shutil.which("unshare"):
            return {"verdict": "skipped", "why": ["a /dev/shm of its own needs root and unshare"],
                    "seconds": 0.0}
        argv = ["unshare", "-m", "sh", "-c",
                'mount -t tmpfs -o size=%dm tmpfs /dev/shm && exec "$@"' % expect["shm_mib"],
                "sh"] + argv
    start = time.monotonic()
    try:
        ran = subprocess.run(argv, cwd=ZOO, env=env, capture_output=True, text=True)
    finally:
        if cgroup is not None:
            cgroup.remove()
    took = time.monotonic() - start
    killed = expect.get("killed", False)
    if ran.returncode != (137 if killed else expect.get("exit_code", 0)):
        return {"verdict": "wrong", "why": ["exit %d: %s" % (ran.returncode, ran.stderr[-400:])],
                "seconds": took}
    text, summary, truth = read_run(collector, trace, truth_path)
    verdict, why = judge(expect, truth, summary["analysis"], text)
    ratios, close = zoo_thresholds.measure(expect, truth, summary["analysis"])
    if close and verdict == "right":
        verdict = "partial"
    return {"verdict": verdict, "why": why + close, "seconds": took, "trace": trace,
            "checks": zoo_thresholds.checked_by(name),
            "thresholds": ratios}


def read_run(collector, trace, truth_path):
    """A recorded program's summary (text and JSON) and what it measured of itself."""
    text = subprocess.run([collector, "summary", trace], capture_output=True, text=True).stdout
    summary = json.loads(subprocess.run([collector, "summary", "--json", trace],
                                        capture_output=True, text=True, check=True).stdout)
    with open(truth_path) as f:
        truth = json.load(f)
    return text, summary, truth


def leak_rate(analysis, clock, label="slope_bytes_per_"):
    """The rate the leak finding gives per `clock`, in bytes, from its evidence (the growth's, or
    with `held_bytes_per_` what its holders were counted gaining)."""
    for f in analysis["findings"]:
        if f["id"] != "leak":
            continue
        for e in f["evidence"]:
            if e.get("label") == label + clock:
                return e.get("value")
    return None


def false_numbers(analysis, text):
    """What the summary says that its own numbers contradict (the invariants
    `findings_agree_with_facts.rs` holds on every committed trace, held here on every program)."""
    out = []
    evals = len(analysis.get("phase_transitions") or [])
    for m in re.finditer(r"(\d+) of (\d+) evals kept memory", text):
        if int(m.group(2)) != evals:
            out.append("%r beside %d evals" % (m.group(0), evals))
    if evals == 0 and "eval(s)" in text:
        out.append("an eval named in a run with none")
    for fit in analysis.get("leak_fits") or []:
        file = fit.get("file_backed_growth_bytes")
        if file is not None and file > max(fit["growth_bytes"], 0):
            out.append("%d B file-backed of a %d B growth" % (file, fit["growth_bytes"]))
    return out


def findings_missed(expect, ids):
    """What makes a run wrong by its finding ids: one it must have is missing, one it must not
    have is there."""
    wrong = ["no %s finding" % kind for kind in expect.get("findings", []) if kind not in ids]
    return wrong + ["false finding: %s" % kind for kind in expect.get("absent", []) if kind in ids]


def judge(expect, truth, analysis, text):
    ids = {f["id"] for f in analysis["findings"]}
    wrong, partial = findings_missed(expect, ids), false_numbers(analysis, text)
    flat = " ".join(text.split())  # words wrapped across lines read as one line
    for w in expect.get("words", []):
        if w not in flat:
            partial.append("the text lacks %r" % w)
    for w in expect.get("no_words", []):
        if w in flat:
            line = next(l.strip() for l in text.splitlines() if w in l)
            partial.append("the text says %r: %s" % (w, line[:120]))
    if expect.get("thinned") and not any(f.get("steps_per_point", 1) > 1
                                         for f in analysis.get("leak_fits") or []):
        partial.append("no leak fit thinned: fewer marks a stage than the program meant")
    if "evals" in expect:
        evals = len(analysis.get("phase_transitions") or [])
        if evals != expect["evals"]:
            partial.append("%s evals, the program ran %d" % (evals, expect["evals"]))
    clock = expect.get("rate_per")
    if clock and "leak" in ids:
        want = truth.get("kept_bytes_per_" + clock)
        got = leak_rate(analysis, clock)
        if got is None:
            partial.append("the leak is not given per %s" % clock)
        elif want and abs(got - want) > expect.get("rate_tolerance", RATE_TOLERANCE) * want:
            partial.append("leak %.3g B/%s, the program kept %.3g" % (got, clock, want))
        want = truth.get("held_bytes_per_" + clock)
        got = leak_rate(analysis, clock, "held_bytes_per_")
        if want and (got is None or abs(got - want) > RATE_TOLERANCE * want):
            partial.append("its holders gain %s B/%s, the program's %.3g" % (got, clock, want))
    if "run_up_per_batch" in expect:
        want = truth.get("kept_bytes_per_batch")
        rows = (analysis.get("run_up") or {}).get("held") or []
        if not rows:
            partial.append("no run-up names what grew in the eval")
        else:
            h = rows[0]
            got = h["bytes"] / max(h["to_step"] - h["from_step"], 1)
            if want and abs(got - want) > RATE_TOLERANCE * want:
                partial.append("run-up %.3g B/batch, the program kept %.3g" % (got, want))
            if expect["run_up_per_batch"] not in h.get("holder", ""):
                partial.append("the run-up's holder is %r" % h.get("holder"))
    if wrong:
        return "wrong", wrong + partial
    return ("partial" if partial else "right"), partial


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--only", default="", help="comma-separated program names")
    p.add_argument("--keep", default=None, help="a directory for the traces (default: temporary)")
    a = p.parse_args()
    collector, python = tools()
    if not os.path.exists(collector):
        raise SystemExit("zoo: no collector at %s (cargo build --release -p oomscope-collector)"
                         % collector)
    scratch = None if a.keep else tempfile.TemporaryDirectory(prefix="oomscope-zoo-")
    out_dir = a.keep or scratch.name
    os.makedirs(out_dir, exist_ok=True)
    results = {}
    for name in programs(set(filter(None, a.only.split(",")))):
        r = results[name] = run_one(name, collector, python, out_dir)
        if scratch is not None:
            r.pop("trace", None)
        if not a.json:
            print("%-22s %-8s %5.1f s  %s" % (name, r["verdict"], r["seconds"],
                                               "; ".join(r["why"] + [
                                                   "%s %.2f" % kv for kv in
                                                   r.get("thresholds", {}).items()])),
                  flush=True)
    if scratch is not None:
        scratch.cleanup()
    counts = {v: sum(r["verdict"] == v for r in results.values())
              for v in ("right", "partial", "wrong", "skipped")}
    if a.json:
        json.dump({"programs": results, "counts": counts,
                   "thresholds": zoo_thresholds.THRESHOLDS}, sys.stdout, indent=1)
        print()
    else:
        print("%d right, %d partial, %d wrong, %d skipped of %d" % (
            counts["right"], counts["partial"], counts["wrong"], counts["skipped"],
            len(results)))


if __name__ == "__main__":
    main()
