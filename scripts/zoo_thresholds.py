"""The thresholds the analysis decides by, each set on some programs (its calibration set, named
here and in its constant's docs) and checked on others: the zoo's programs, written after it.
Every program a threshold decides is measured against it, as a ratio to the threshold, and must
sit clear of it by `MARGIN` on the side its verdict needs, not merely on that side: a decision
on the edge flips on a loaded machine. `scripts/zoo.py` reports the ratios per program and marks
a program partial when one is too close; `collector/tests/zoo.rs` requires each threshold
measured on at least one program. The programs each was set on are named in `calibrated_on`;
the zoo's others are its check."""

import json
import os

MARGIN = 1.1
MIB = 1 << 20

# Every threshold the analysis decides by, with the programs it was set on and those that check
# it (`shared/analysis/thresholds.json`, held to the source by `shared/analysis/tests/
# thresholds.rs`): a zoo program named in a threshold's `checked_on` checks it by coming out right.
TABLE = json.load(open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "shared", "analysis", "thresholds.json")))["thresholds"]


def checked_by(program):
    """The thresholds a zoo program's verdict checks (its path in their `checked_on`)."""
    path = "collector/tests/zoo/%s.py" % program
    return sorted(t["name"] for t in TABLE
                  if any(c.get("path") in (path, "collector/tests/zoo") for c in t["checked_on"]))

# The analysis's values (a test holds the constants: `zoo.rs`).
WORKERS_EXPLAIN_FRACTION = 0.6
EVAL_STAIRCASE_MIN_BYTES = 16 * MIB
EVAL_STAIRCASE_REPEATS = 4
MIN_R_SQUARED = 0.8

THRESHOLDS = {
    "leak_floor": {
        "what": "leaks::MIN_GROWTH_BYTES / MIN_GROWTH_FRACTION_OF_LIMIT and their steady and "
                "short-run variants: a fit's `min_leak_growth_bytes`",
        "calibrated_on": ["leaks.rs's simulated runs", "train.py --leak list (python_hooks_findings.rs)"],
    },
    "workers_share": {
        "what": "workers::WORKERS_EXPLAIN_FRACTION: the forked workers' copies against the "
                "host's growth",
        "calibrated_on": ["cow_dataloader.py (python_hooks_findings.rs; v1_10_cow_workers.oomt)",
                          "cow_text_corpus.py (the zoo's first check found 0.7 too tight)"],
    },
    "eval_staircase": {
        "what": "recommend::eval::EVAL_STAIRCASE_MIN_BYTES: memory an eval keeps, a stair",
        "calibrated_on": ["Lightning's validation outputs under load "
                          "(frameworks.rs; v1_10_lightning_eval_creep.oomt)"],
    },
    "pss_settle": {
        "what": "run::pss::PSS_SETTLE: a changed tree read once it settled (every worker's "
                "private memory read, in full)",
        "calibrated_on": ["cow_dataloader.py (python_hooks_findings.rs)"],
    },
}


def measure(expect, truth, analysis):
    """{threshold: ratio to it} for the thresholds that decide this program, and the problems
    (a ratio within `MARGIN` of 1, or on the wrong side)."""
    findings = set(expect.get("findings", []))
    absent = set(expect.get("absent", []))
    ratios, problems = {}, []

    def need(name, ratio, above):
        ratios[name] = round(ratio, 3)
        if (ratio < MARGIN) if above else (ratio > 1 / MARGIN):
            problems.append("%s at %.2f of its threshold (%s it by %.2fx or more)"
                            % (name, ratio, "above" if above else "below", MARGIN))

    fits = analysis.get("leak_fits") or []
    if "leak" in findings:
        leaks = [f["growth_bytes"] / f["min_leak_growth_bytes"] for f in fits
                 if f["is_leak"] and f["min_leak_growth_bytes"] > 0]
        if leaks:
            need("leak_floor", max(leaks), above=True)
    elif "leak" in absent:
        # Fits the floor alone keeps from being a leak: steady, still rising, not explained.
        near = [f["growth_bytes"] / f["min_leak_growth_bytes"] for f in fits
                if f["sustained"] and f["r_squared"] >= MIN_R_SQUARED and f["growth_bytes"] > 0
                and f["min_leak_growth_bytes"] > 0 and not f["copied_by_workers"]
                and not f["staircase_creep"]]
        if near:
            need("leak_floor", max(near), above=False)
    # Fits the workers' share decided: large enough to be a leak otherwise.
    shares = [f["workers_copied_bytes"] / f["growth_bytes"] / WORKERS_EXPLAIN_FRACTION
              for f in fits if f.get("workers_copied_bytes") and f["growth_bytes"] > 0
              and f["growth_bytes"] >= f["min_leak_growth_bytes"]]
    if shares and "worker-private-growth" in findings:
        need("workers_share", min(shares), above=True)
    stairs = [t["retained_bytes"] or 0 for t in analysis.get("phase_transitions") or []]
    # A staircase is `EVAL_STAIRCASE_REPEATS` evals keeping the threshold each: the least of the
    # evals that keep the most decides it, kept or not (one eval's warm-up, a first eval's
    # caches, is no stair).
    kept = sorted(stairs, reverse=True)[:EVAL_STAIRCASE_REPEATS]
    if len(kept) == EVAL_STAIRCASE_REPEATS and "eval-retains-memory" in findings:
        need("eval_staircase", min(kept) / EVAL_STAIRCASE_MIN_BYTES, above=True)
    elif len(kept) == EVAL_STAIRCASE_REPEATS and "eval-retains-memory" in absent:
        need("eval_staircase", min(kept) / EVAL_STAIRCASE_MIN_BYTES, above=False)
    if truth.get("workers_private_bytes"):
        workers = analysis.get("growing_workers") or []
        read = sum(w["last_private_bytes"] for w in workers)
        ratios["pss_settle"] = round(read / truth["workers_private_bytes"], 3)
        if len(workers) != truth.get("workers"):
            problems.append("pss_settle: %d growing workers read, the program had %s"
                            % (len(workers), truth.get("workers")))
        elif abs(read / truth["workers_private_bytes"] - 1) > MARGIN - 1:
            problems.append("pss_settle: the workers' private memory read %.3g B, the program's "
                            "%.3g" % (read, truth["workers_private_bytes"]))
    return ratios, problems
