"""Feed-ranking service loop that memoises user profiles in a mutable default argument.

Each request is a feed refresh for a batch of 32 users with 100 candidate
items per user.  ``user_features(user_id, clicked, _history={})`` keeps each
user's clicked-item embeddings as a plain Python list of floats (``.tolist()``,
so it could be dumped as JSON) in the dict that is the function's default
argument, and returns the mean of the last few clicks as the user vector.
Most requests bring users never seen before, and returning users' lists grow
with every click; nothing is ever evicted.  A small MLP scores the candidates.

Correct diagnosis: resident memory grows linearly with the number of requests
served (about ``holder_bytes_per_request`` per request: 32 users x 64 Python
floats and their list/dict slots), without bound.  The memory is Python
objects (lists of floats) held by the mutable default argument ``_history`` of
``user_features`` - a process-lifetime dict that nobody clears.  Fix: keep
only what the feature needs (the last K clicks, as a fixed-size tensor/array)
and store profiles in a bounded cache (LRU/TTL) or an external feature store
instead of a mutable default argument.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "request",
    "rate_key": "rss_floor_slope_per_request",
    "rate_tolerance": 0.33,
    "holder": "_history",
    "memory_kind": "python_objects",
    "advice": "Do not memoise into the mutable default argument _history: keep only the last K clicks per user in a bounded (LRU/TTL) store, or an external feature store.",
    "findings": ["leak"],
    "absent": ["model-copies", "reference-cycles", "activations-dominate"],
    "words": ["_history"],
    "no_words": [],
    "holder_bytes_key": "history_bytes",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.manual_seed(0)

REQUESTS = _truth.pick(2000, 60)
USERS_PER_REQUEST = 32
CANDIDATES = 100
N_ITEMS = 50_000
EMB = 64
RECENT = 5


def user_features(user_id, clicked, _history={}):
    hist = _history.setdefault(user_id, [])
    hist.extend(clicked.tolist())
    recent = torch.tensor(hist[-RECENT * EMB:]).view(-1, EMB)
    return recent.mean(0)


class Ranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * EMB, 256), nn.ReLU(),
                                 nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 1))

    @torch.no_grad()
    def forward(self, user_vecs, cand_vecs):
        u = user_vecs[:, None, :].expand(-1, cand_vecs.shape[1], -1)
        return self.mlp(torch.cat([u, cand_vecs], -1)).squeeze(-1)


def history_bytes(h):
    total = sys.getsizeof(h)
    for k, lst in h.items():
        total += sys.getsizeof(k) + sys.getsizeof(lst) + 24 * len(lst)
    return total


def main():
    rng = np.random.default_rng(1)
    item_emb = torch.randn(N_ITEMS, EMB, generator=torch.Generator().manual_seed(2))
    ranker = Ranker().eval()
    next_user = 0
    floor = _truth.Floor()
    held = []
    served = 0
    for req in range(REQUESTS):
        # 70% new users, 30% returning ones
        returning = rng.random(USERS_PER_REQUEST) < 0.3
        users = []
        for r in returning:
            if r and next_user > 0:
                users.append(int(rng.integers(0, next_user)))
            else:
                users.append(next_user)
                next_user += 1
        clicked = item_emb[torch.from_numpy(rng.integers(0, N_ITEMS, USERS_PER_REQUEST))]
        user_vecs = torch.stack([user_features(u, c) for u, c in zip(users, clicked)])
        cands = item_emb[torch.from_numpy(rng.integers(0, N_ITEMS, (USERS_PER_REQUEST, CANDIDATES)))]
        scores = ranker(user_vecs, cands)
        top = scores.topk(10, dim=1).indices
        served += top.numel()
        floor.end_unit()
        if req % 100 == 0:
            h = user_features.__defaults__[0]
            held.append((req, history_bytes(h)))
            print(f"request {req:5d}  users known {len(h):7d}  "
                  f"rss {_truth.rss() / _truth.MiB:7.1f} MiB")

    h = user_features.__defaults__[0]
    xs = [r for r, _ in held]
    ys = [b for _, b in held]
    _truth.write(
        requests=REQUESTS,
        users_known=len(h),
        floats_held=sum(len(v) for v in h.values()),
        history_bytes=history_bytes(h),
        holder_bytes_per_request=_truth.slope(xs, ys),
        rss_floor_slope_per_request=floor.rate(skip_frac=0.1),
        rss_floor_growth=floor.floors[-1] - floor.floors[0],
        items_served=served,
        **floor.summary("request"),
    )


if __name__ == "__main__":
    main()
