"""Fine-tuning a pretrained MLP backbone with gradual unfreezing (ULMFiT style).

A "pretrained" backbone of 8 residual blocks (1024 -> 4096 -> 1024, 8.4 M
parameters / 32 MiB each) gets a new classification head. Training starts with
only the head trainable; every 10 optimizer steps the next block from the top
is unfrozen and added to AdamW with `optimizer.add_param_group(...)` and a
smaller learning rate; once all 8 blocks are unfrozen (step 80) the whole
model trains for 30 more steps. Memory climbs in a staircase: at the first
step after each unfreeze, AdamW lazily creates `exp_avg` and `exp_avg_sq` for
the new block (64 MiB) and backward starts producing its gradients (32 MiB,
kept between steps until the next zero_grad), so tensors grow by 96 MiB per
stage (RSS by ~110-120 MiB, the rest being allocator slack from the longer
backward), the floor is roughly flat within a stage (a few tens of MB of
drift), and during the last 30 steps it rises only ~30 MB: the staircase ends
at ~1.9 GB once every block is trainable. Nothing is leaking; the holder is
the optimizer state (`optimizer.state`), which ends at twice the size of the
parameters. A correct diagnosis reports a staircase tied to the unfreeze
schedule, with optimizer state as the largest share, not a leak. Advice, if
any: this is the expected cost of Adam on the unfrozen blocks; a lighter
optimizer (SGD with momentum, Adafactor, 8-bit Adam) or unfreezing fewer
blocks lowers the final plateau.

EXPECT = {
    "symptom": "staircase",
    "unit": "step",
    "rate_key": "growth_per_step",
    "rate_tolerance": 0.33,
    "holder": "optimizer.state",
    "memory_kind": "tensors",
    "advice": "use a lighter optimizer or unfreeze fewer blocks",
    "findings": ["optimizer-state-heavy"],
    "absent": ["leak", "reference-cycles", "eval-retains-memory", "worker-private-growth"],
    "words": ["optimizer"],
    "no_words": ["DataLoader"],
    "stair_key": "stair_bytes",
    "flat_rate_key": "growth_per_step_final_stage",
}
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
DIM, HIDDEN, N_BLOCKS, N_CLASSES = 1024, 4096, 8, 10
STEPS_PER_STAGE, FINAL_STEPS = 10, 30
BATCH = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(N_BLOCKS))
        self.head = nn.Linear(DIM, N_CLASSES)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = Classifier()
model.blocks.requires_grad_(False)  # pretend these came from a checkpoint
teacher = torch.randn(DIM, N_CLASSES)

base_lr = 3e-4
optimizer = torch.optim.AdamW(model.head.parameters(), lr=base_lr, weight_decay=0.01)


def optimizer_state_bytes(opt):
    return _truth.storage_bytes(t for st in opt.state.values() for t in st.values()
                                if torch.is_tensor(t) and t.dim() > 0)


rss_start = _truth.rss_bytes()
stages = []
step = 0
for stage in range(N_BLOCKS + 1):
    if stage > 0:
        block = model.blocks[N_BLOCKS - stage]
        block.requires_grad_(True)
        optimizer.add_param_group({"params": block.parameters(),
                                   "lr": base_lr * 0.7 ** stage})
    for i in range(STEPS_PER_STAGE if stage < N_BLOCKS else FINAL_STEPS):
        x = torch.randn(BATCH, DIM)
        y = (x @ teacher).argmax(1)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if i == 1:
            rss_after_first_steps = _truth.rss_bytes()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    stages.append({
        "stage": stage, "end_step": step, "trainable_params": trainable,
        "optimizer_state_bytes": optimizer_state_bytes(optimizer),
        "grad_bytes": _truth.storage_bytes(p.grad for p in model.parameters()
                                           if p.grad is not None),
        "rss_early": rss_after_first_steps, "rss_end": _truth.rss_bytes(),
    })
    print(f"stage {stage} step {step} loss {loss.item():.3f} trainable {trainable / 1e6:.1f}M")

param_bytes = _truth.storage_bytes(model.parameters())
rss_end = _truth.rss_bytes()
stair = [b["rss_end"] - a["rss_end"] for a, b in zip(stages, stages[1:])]
_truth.write(
    unit="optimizer_step",
    optimizer_steps=step,
    stages=stages,
    unfreeze_steps=[STEPS_PER_STAGE * k for k in range(1, N_BLOCKS + 1)],
    param_bytes=param_bytes,
    optimizer_state_bytes=stages[-1]["optimizer_state_bytes"],
    grad_bytes=stages[-1]["grad_bytes"],
    stair_bytes=sum(stair) / len(stair),
    rss_start=rss_start,
    rss_end=rss_end,
    # over the unfreezing phase: end of stage 0 (step 10) to step 82
    growth_per_step=(stages[-1]["rss_early"] - stages[0]["rss_end"])
    / (N_BLOCKS * STEPS_PER_STAGE + 2 - STEPS_PER_STAGE),
    growth_per_step_final_stage=(stages[-1]["rss_end"] - stages[-1]["rss_early"])
    / (FINAL_STEPS - 2),
)
