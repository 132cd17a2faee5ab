"""In-process learning-rate / weight-decay sweep with a gradient-norm monitor.

Six configurations (3 learning rates x 2 weight decays) of the same
click-through model (a 70 000 x 128 item embedding, 36 MB, plus a small MLP
over item and user features) are trained one after another in one process, 50
AdamW steps each, and their final losses are compared. Each trial builds a
`Trainer` that registers `self._record_grad_norm` as a full backward hook on
every Linear layer, to log per-layer gradient norms. The bound method keeps
the Trainer alive from inside the model's hook dict, and the Trainer holds the
model: a reference cycle. When the loop rebinds `trainer` to the next trial,
the old Trainer is unreachable but its reference count is not zero, so its
model, gradients and AdamW moments (~4 x 36 MB = 145 MB) stay in memory until
a full garbage collection, which does not happen during the sweep (the cyclic
GC's oldest generation runs rarely once torch is imported). Memory rises in
one step per trial and is flat within a trial; a final `gc.collect()` gives it
all back. A correct diagnosis says memory is only freed by the garbage
collector (reference cycles through the backward hooks of each trial's
`Trainer`), and advises removing the hook handles at the end of each trial (or
hooking with a function that does not capture the trainer) or calling
gc.collect() between trials.

EXPECT = {
    "symptom": "staircase",
    "unit": "step",
    "rate_key": "growth_per_step",
    "rate_tolerance": 0.33,
    "holder": "Trainer",
    "memory_kind": "tensors",
    "advice": "remove the backward-hook handles after each trial or gc.collect() between trials",
    "findings": ["reference-cycles"],
    "absent": ["worker-private-growth", "eval-retains-memory", "activations-dominate"],
    "words": ["gc.collect"],
    "no_words": ["DataLoader"],
    "stair_key": "stair_bytes",
    "freed_by_gc_key": "freed_by_gc_collect",
}
"""
import gc
import itertools
import weakref
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
ITEMS, DIM, USER_FEATURES, BATCH, STEPS = 70_000, 128, 64, 512, 50


class ClickModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.items = nn.Embedding(ITEMS, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM + USER_FEATURES, 256), nn.ReLU(),
                                 nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, item, user):
        return self.mlp(torch.cat([self.items(item), user], 1)).squeeze(1)


class Trainer:
    def __init__(self, lr, weight_decay):
        self.model = ClickModel()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr,
                                           weight_decay=weight_decay)
        self.grad_norms = defaultdict(list)
        self.names = {}
        for name, module in self.model.named_modules():
            if isinstance(module, nn.Linear):
                self.names[module] = name
                module.register_full_backward_hook(self._record_grad_norm)

    def _record_grad_norm(self, module, grad_input, grad_output):
        self.grad_norms[self.names[module]].append(grad_output[0].norm().item())

    def fit(self, items, users, clicks):
        for step in range(STEPS):
            idx = torch.randint(0, len(items), (BATCH,))
            logits = self.model(items[idx], users[idx])
            loss = F.binary_cross_entropy_with_logits(logits, clicks[idx])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return loss.item()


item_pop = torch.randn(ITEMS)
users = torch.randn(32_768, USER_FEATURES)
items = torch.randint(0, ITEMS, (32_768,))
clicks = (item_pop[items] + users[:, 0] > 0.5).float()

rss_start, alive, trials, results = _truth.rss_bytes(), [], [], {}
for lr, wd in itertools.product((3e-4, 1e-3, 3e-3), (0.0, 0.05)):
    trainer = Trainer(lr, wd)
    alive.append(weakref.ref(trainer))
    results[(lr, wd)] = trainer.fit(items, users, clicks)
    trials.append({"lr": lr, "weight_decay": wd, "end_step": len(trials) * STEPS + STEPS,
                   "rss": _truth.rss_bytes(),
                   "trainers_alive": sum(r() is not None for r in alive)})
    print(f"lr {lr:g} wd {wd:g} loss {results[(lr, wd)]:.3f} "
          f"RSS {trials[-1]['rss'] / 2**20:.0f} MiB")

best = min(results, key=results.get)
print(f"best config: lr {best[0]:g} wd {best[1]:g}")
del trainer
rss_before_gc = _truth.rss_bytes()
alive_before_gc = sum(r() is not None for r in alive)
trial_tensor_bytes = 4 * _truth.storage_bytes(alive[-1]().model.parameters())
collected = gc.collect()
rss_after_gc = _truth.rss_bytes()
stairs = [b["rss"] - a["rss"] for a, b in zip(trials, trials[1:])]
_truth.write(
    unit="optimizer_step",
    optimizer_steps=len(trials) * STEPS,
    trials=trials,
    trial_tensor_bytes=trial_tensor_bytes,
    stair_bytes=sum(stairs) / len(stairs),
    growth_per_step=(trials[-1]["rss"] - trials[0]["rss"]) / (trials[-1]["end_step"] - trials[0]["end_step"]),
    rss_start=rss_start,
    rss_before_gc=rss_before_gc,
    rss_after_gc=rss_after_gc,
    freed_by_gc_collect=rss_before_gc - rss_after_gc,
    trainers_alive_before_gc=alive_before_gc,
    trainers_alive_after_gc=sum(r() is not None for r in alive),
    gc_collected_objects=collected,
)
