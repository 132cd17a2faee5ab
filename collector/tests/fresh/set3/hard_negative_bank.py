"""Dual-encoder retrieval training with a hard-negative bank that is pruned periodically.

Every step the script mines hard negatives: it encodes a pool of random
candidate documents without gradients, takes the candidates most similar to
each query, and appends their embeddings and hardness scores to the miner's
bank (``self.bank``, one tensor re-built with ``torch.cat``).  The loss uses
in-batch negatives plus a sample drawn from the bank.  Every PRUNE_EVERY steps
the miner prunes the bank down to the KEEP hardest entries.

Correct diagnosis: the memory is a saw-tooth that is bounded by design.  The
bank grows by a fixed amount each step (about ``bank_growth_per_step`` bytes)
for PRUNE_EVERY steps, then drops back when it is pruned; every cycle reaches
the same height (about ``bank_max_bytes`` of bank), so the resident memory
stays within a fixed band for the whole run.  This is not a leak and nothing
needs to change (the prune interval/keep size is the intended knob if the band
were too high, but at this size it is fine).

EXPECT = {
    "symptom": "bounded",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "self.bank",
    "memory_kind": "tensors",
    "advice": None,
    "findings": [],
    "absent": ["leak", "reference-cycles", "eval-retains-memory"],
    "words": [],
    "no_words": ["grows without bound", "unbounded growth"],
    "bound_key": "bank_max_bytes",
    "holder_bytes_key": "bank_max_bytes",
    "flat_rate_key": "cycle_top_slope_per_step",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

STEPS = _truth.pick(320, 24)
PRUNE_EVERY = _truth.pick(40, 8)
FEAT = 256
EMB = 256
BATCH = 256
POOL = 4096
PER_QUERY = 8          # hard negatives kept per query per step -> 2048 rows/step
KEEP = 4096            # rows kept after a prune
BANK_SAMPLE = 1024
N_DOCS = 50_000


def encoder():
    return nn.Sequential(nn.Linear(FEAT, 512), nn.GELU(), nn.Linear(512, EMB))


class HardNegativeMiner:
    def __init__(self):
        self.bank = torch.empty(0, EMB)
        self.scores = torch.empty(0)

    @torch.no_grad()
    def mine(self, q, cand_emb):
        sim = q @ cand_emb.T                       # (BATCH, POOL)
        top = sim.topk(PER_QUERY + 1, dim=1)      # drop the very top (likely a positive)
        idx = top.indices[:, 1:].reshape(-1)
        self.bank = torch.cat([self.bank, cand_emb[idx]])
        self.scores = torch.cat([self.scores, top.values[:, 1:].reshape(-1)])

    def sample(self, g, n):
        if self.bank.shape[0] == 0:
            return None
        idx = torch.randint(0, self.bank.shape[0], (n,), generator=g)
        return self.bank[idx]

    def prune(self):
        if self.bank.shape[0] > KEEP:
            keep = self.scores.topk(KEEP).indices
            self.bank = self.bank[keep].clone()
            self.scores = self.scores[keep].clone()


def main():
    g = torch.Generator().manual_seed(1)
    docs = torch.randn(N_DOCS, FEAT, generator=g)
    q_enc, d_enc = encoder(), encoder()
    opt = torch.optim.Adam(list(q_enc.parameters()) + list(d_enc.parameters()), lr=1e-3)
    miner = HardNegativeMiner()
    floor = _truth.Floor()
    bank_bytes = []
    for step in range(STEPS):
        ids = torch.randint(0, N_DOCS, (BATCH,), generator=g)
        d_pos = docs[ids]
        queries = d_pos + 0.5 * torch.randn(BATCH, FEAT, generator=g)
        q = F.normalize(q_enc(queries), dim=1)
        p = F.normalize(d_enc(d_pos), dim=1)
        with torch.no_grad():
            pool = docs[torch.randint(0, N_DOCS, (POOL,), generator=g)]
            cand = F.normalize(d_enc(pool), dim=1)
        negs = miner.sample(g, BANK_SAMPLE)
        logits = q @ p.T
        if negs is not None:
            logits = torch.cat([logits, q @ negs.T], dim=1)
        loss = F.cross_entropy(logits / 0.05, torch.arange(BATCH))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        miner.mine(q.detach(), cand)
        if (step + 1) % PRUNE_EVERY == 0:
            miner.prune()
        del logits, loss, negs, cand, pool
        bank_bytes.append(_truth.storage_bytes([miner.bank, miner.scores]))
        floor.end_unit()
        if step % PRUNE_EVERY == PRUNE_EVERY - 2:
            print(f"step {step:4d}  bank rows {miner.bank.shape[0]:6d}  "
                  f"rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    # per prune cycle: highest and lowest floor
    f = floor.floors
    tops, bottoms, cyc_x = [], [], []
    for c in range(1, STEPS // PRUNE_EVERY):
        seg = f[c * PRUNE_EVERY:(c + 1) * PRUNE_EVERY]
        tops.append(max(seg))
        bottoms.append(min(seg))
        cyc_x.append(c * PRUNE_EVERY)
    _truth.write(
        steps=STEPS,
        prune_every=PRUNE_EVERY,
        bank_max_bytes=max(bank_bytes),
        bank_min_bytes_after_prune=min(bank_bytes[PRUNE_EVERY:]) if len(bank_bytes) > PRUNE_EVERY else 0,
        bank_growth_per_step=BATCH * PER_QUERY * (EMB * 4 + 4),
        cycle_tops=tops,
        cycle_bottoms=bottoms,
        cycle_top_slope_per_step=_truth.slope(cyc_x, tops),
        rss_sawtooth_amplitude=(sum(tops) / len(tops) - sum(bottoms) / len(bottoms)) if tops else 0,
        rss_floor_within_cycle_slope=(sum(
            _truth.slope(list(range(PRUNE_EVERY - 1)), f[c * PRUNE_EVERY:(c + 1) * PRUNE_EVERY - 1])
            for c in range(1, STEPS // PRUNE_EVERY)) / max(1, STEPS // PRUNE_EVERY - 1)),
        **floor.summary("step"),
    )


if __name__ == "__main__":
    main()
