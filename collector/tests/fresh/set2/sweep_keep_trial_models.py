"""A small hyper-parameter sweep (learning rate x weight decay) for an MLP
classifier on synthetic tabular data, run in one process.  Each trial's
result is appended to ``results`` together with its model and optimizer so
that the best trial can be "resumed" for longer training after the sweep.

What a correct memory diagnosis says: memory rises in equal stairs, one per
trial (about 80 MB each), and never comes down during the sweep: ``results``
keeps every trial's model, its gradients and its AdamW state (exp_avg,
exp_avg_sq), i.e. ~4x the parameter bytes per trial, although only the best
trial is ever used.  The growth is unbounded in the number of trials (a
bigger grid would run out of memory).  Fix: keep only the metrics and the
best trial's ``state_dict`` (or save each trial's checkpoint to disk) and
let each trial's model and optimizer be freed.

EXPECT = {
    "symptom": "staircase",
    "unit": "iteration",
    "rate_key": "rate_bytes_per_trial",
    "rate_tolerance": 0.33,
    "holder": "results",
    "memory_kind": "tensors",
    "advice": "Keep only each trial's metrics (and the best state_dict, or a checkpoint on disk) instead of every model and optimizer.",
    "findings": ["leak", "model-copies"],
    "absent": ["reference-cycles", "eval-retains-memory", "worker-private-growth", "input-peak", "non-finite-gradients"],
    "words": ["results"],
    "no_words": ["DataLoader", "activations"],
    "stair_key": "stair_bytes",
    "holder_bytes_key": "results_tensor_bytes",
}
"""
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
FEATURES, HIDDEN, CLASSES = 256, 1536, 10


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(123))
    x = torch.randn(n, FEATURES, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, CLASSES, generator=g)).argmax(1)
    return x, y


def build_model(dropout):
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.GELU(), nn.Dropout(dropout),
        nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Dropout(dropout),
        nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
        nn.Linear(HIDDEN, CLASSES))


def run_trial(cfg, train, val, steps=36, batch_size=128):
    torch.manual_seed(cfg["seed"])
    model = build_model(cfg["dropout"])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    x, y = train
    for step in range(steps):
        idx = torch.randint(0, len(x), (batch_size,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(val[0]).argmax(1) == val[1]).float().mean().item()
    model.train()
    return acc, model, opt


def main():
    train, val = make_data(20_000, 0), make_data(2_000, 1)
    grid = list(itertools.product([1e-3, 3e-4, 1e-4], [0.0, 1e-2, 1e-1]))
    results = []
    rss_after = [_truth.rss()]
    for i, (lr, wd) in enumerate(grid):
        cfg = {"lr": lr, "weight_decay": wd, "dropout": 0.1, "seed": i}
        acc, model, opt = run_trial(cfg, train, val)
        results.append({"config": cfg, "val_acc": acc, "model": model, "optimizer": opt})
        del model, opt
        rss_after.append(_truth.rss())
        print(f"trial {i}: lr={lr:g} wd={wd:g} val_acc={acc:.3f}")

    best = max(results, key=lambda r: r["val_acc"])
    print(f"best: {best['config']} ({best['val_acc']:.3f}); resuming it")
    model, opt = best["model"], best["optimizer"]
    x, y = train
    for step in range(20):
        idx = torch.randint(0, len(x), (128,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()

    per_trial = [b - a for a, b in zip(rss_after, rss_after[1:])]
    params = _truth.storage_bytes(results[0]["model"].parameters())
    holder = _truth.storage_bytes(_truth.walk_tensors(results))
    stairs = sorted(per_trial[1:])  # the first trial also pays one-off warm-up costs
    _truth.write(
        trials=len(results),
        param_bytes_per_model=params,
        results_tensor_bytes=holder,
        results_tensor_bytes_per_trial=holder / len(results),
        stair_bytes=stairs[len(stairs) // 2],
        stairs_bytes=per_trial,
        rate_bytes_per_trial=_truth.slope(list(range(1, len(rss_after))), rss_after[1:]),
        growth_bytes=rss_after[-1] - rss_after[0],
        rss_after_trial_bytes=rss_after,
        best_val_acc=best["val_acc"],
    )


if __name__ == "__main__":
    main()
