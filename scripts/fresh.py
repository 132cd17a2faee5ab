#!/usr/bin/env python3
"""A fresh set's scorecard: programs written blind to the analysis (`collector/tests/fresh/setN/`,
each with its truth measured by itself and its expected diagnosis in its docstring, committed
before the collector ran them), run under `collector run` and scored right, partial or wrong.

The fresh sets measure the tool the way a user meets it; the zoo (`scripts/zoo.py`) measures the
rules on the programs they were written for. A fresh program's `EXPECT = {...}` says:
- `symptom`: what memory did (`none`, `linear_growth`, `staircase`, `bounded`, `transient_peak`,
  `follows_input`); `unit`: the clock it is said on (`step`, `request`, `iteration`);
- `findings` / `absent`: finding ids that must / must not be there;
- `rate_key` (+ `rate_tolerance`, default a third): the truth key holding the program's own growth
  per `unit`; the tool's rate for the rise must be within the tolerance of it (a request may be
  said per forward, an iteration per step or forward: `CLOCKS`; the number decides);
- `holder`: what keeps the memory (its last dotted part must be named where a finding is due);
- `words` / `no_words`: phrases the text summary must / must not contain;
- `memory_kind`, `advice` and the `*_key` truths: for the reader (the shape's numbers are held
  against them where the summary states a shape: `analysis.symptom`).

Verdicts: wrong when a finding it must have is missing, one it must not have is there, a problem
is met with "nothing to change" or a program that needs no change is told to change; partial when
the findings are right but a rate, holder, shape or words are not; right otherwise.

Usage: python3 scripts/fresh.py SET_DIR [--json] [--only NAME[,NAME]] [--keep DIR]
Needs the release collector ($CARGO_TARGET_DIR/release/collector, or COLLECTOR) and a Python
with torch and numpy (OOMSCOPE_TORCH_VENV, or PYTHON; numpy comes with scripts/setup-frameworks.sh)."""

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time

import zoo

RATE_TOLERANCE = 1 / 3
PROBLEMS = ("linear_growth", "staircase", "transient_peak", "follows_input")


def expectations(path):
    with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    at = doc.find("EXPECT =")
    if at < 0:
        raise SystemExit("fresh: %s has no EXPECT in its docstring" % path)
    return ast.literal_eval(doc[at + len("EXPECT ="):].strip())


# The tool's clocks a program's own unit may be said on: a serving loop's request is its forward
# (the tool cannot know what a request is; when a request is several forwards the rates differ,
# and the number, held to the program's, decides), an outer iteration of training is a step or a
# forward. The rate is compared, never the name.
CLOCKS = {"request": ("request", "forward"), "iteration": ("iteration", "step", "forward")}


def tool_rate(analysis, unit):
    """The rate the tool gives the rise per `unit` (or a clock of the tool's that `CLOCKS` says
    may be it): the symptom's, else the leak finding's."""
    for clock in CLOCKS.get(unit, (unit,)):
        symptom = analysis.get("symptom") or {}
        if symptom.get("unit") == clock and symptom.get("rate_bytes_per_unit") is not None:
            return symptom["rate_bytes_per_unit"]
        for f in analysis["findings"]:
            if f["id"] != "leak":
                continue
            for e in f["evidence"]:
                if e.get("label") == "slope_bytes_per_" + clock:
                    return e.get("value")
    return None


def judge(expect, truth, analysis, text):
    findings = analysis["findings"]
    ids = {f["id"] for f in findings}
    acts = [f for f in findings if f["severity"] in ("warning", "critical")]
    wrong, partial = zoo.findings_missed(expect, ids), []
    want = expect.get("symptom")
    if want in PROBLEMS and not acts:
        wrong.append("a %s met with nothing to change" % want)
    if want == "none" and acts:
        wrong.append("nothing to change, told: %s" % ", ".join(f["id"] for f in acts))
    symptom = analysis.get("symptom")
    if symptom is not None and symptom.get("shape") != want:
        partial.append("shape %s, the program's %s" % (symptom.get("shape"), want))
    flat = " ".join(text.split())
    for w in expect.get("words", []):
        if w not in flat:
            partial.append("the text lacks %r" % w)
    for w in expect.get("no_words", []):
        if w in flat:
            line = next((l.strip() for l in text.splitlines() if w in l), w)
            partial.append("the text says %r: %s" % (w, line[:120]))
    holder = expect.get("holder")
    if holder and expect.get("findings") and holder.split(".")[-1] not in flat:
        partial.append("the holder %s is not named" % holder)
    if expect.get("rate_key") and want in ("linear_growth", "staircase"):
        truth_rate = truth.get(expect["rate_key"])
        got = tool_rate(analysis, expect.get("unit") or "step")
        tolerance = expect.get("rate_tolerance", RATE_TOLERANCE)
        if got is None:
            partial.append("no rate per %s" % expect.get("unit"))
        elif truth_rate and abs(got - truth_rate) > tolerance * truth_rate:
            partial.append("%.3g B/%s, the program grew %.3g" % (got, expect["unit"], truth_rate))
    if wrong:
        return "wrong", wrong + partial
    return ("partial" if partial else "right"), partial


def run_one(set_dir, name, collector, python, out_dir):
    trace = os.path.join(out_dir, name + ".oomt")
    truth_path = os.path.join(out_dir, name + ".truth.json")
    expect = expectations(os.path.join(set_dir, name + ".py"))
    env = dict(os.environ, ZOO_TRUTH=truth_path, OMP_NUM_THREADS="1")
    argv = [collector, "run", "-q", "-o", trace, "--", python, name + ".py"]
    start = time.monotonic()
    ran = subprocess.run(argv, cwd=set_dir, env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    if ran.returncode != 0:
        return {"verdict": "wrong", "why": ["exit %d: %s" % (ran.returncode, ran.stderr[-400:])],
                "seconds": took}
    text, summary, truth = zoo.read_run(collector, trace, truth_path)
    verdict, why = judge(expect, truth, summary["analysis"], text)
    return {"verdict": verdict, "why": why, "seconds": took, "trace": trace, "text": text}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("set_dir")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--only", default="", help="comma-separated program names")
    p.add_argument("--keep", default=None, help="a directory for traces and summaries")
    a = p.parse_args()
    set_dir = os.path.abspath(a.set_dir)
    collector, python = zoo.tools()
    if not os.path.exists(collector):
        raise SystemExit("fresh: no collector at %s" % collector)
    only = set(filter(None, a.only.split(",")))
    names = sorted(f[:-3] for f in os.listdir(set_dir)
                   if f.endswith(".py") and not f.startswith("_") and (not only or f[:-3] in only))
    scratch = None if a.keep else tempfile.TemporaryDirectory(prefix="oomscope-fresh-")
    out_dir = a.keep or scratch.name
    os.makedirs(out_dir, exist_ok=True)
    results = {}
    for name in names:
        r = results[name] = run_one(set_dir, name, collector, python, out_dir)
        if a.keep and "text" in r:
            with open(os.path.join(out_dir, name + ".txt"), "w") as f:
                f.write(r["text"])
        r.pop("text", None)
        if scratch is not None:
            r.pop("trace", None)
        if not a.json:
            print("%-32s %-8s %5.1f s  %s" % (name, r["verdict"], r["seconds"],
                                               "; ".join(r["why"])), flush=True)
    if scratch is not None:
        scratch.cleanup()
    counts = {v: sum(r["verdict"] == v for r in results.values())
              for v in ("right", "partial", "wrong")}
    if a.json:
        json.dump({"programs": results, "counts": counts}, sys.stdout, indent=1)
        print()
    else:
        print("%d right, %d partial, %d wrong of %d" % (
            counts["right"], counts["partial"], counts["wrong"], len(results)))


if __name__ == "__main__":
    main()
