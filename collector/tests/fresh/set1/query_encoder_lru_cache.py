"""Semantic-search serving loop that memoises query encodings with lru_cache.

A small Transformer query encoder (2 layers, d=384) maps each request's query
text to token states; the request handler mean-pools them and scores the query
against a 20 000-document embedding index to return the top 10. To skip
re-encoding popular queries, `encode(text)` is decorated with
`functools.lru_cache(maxsize=None)` and returns the full (64, 384) token-state
tensor (96 KiB) so that later re-ranking code could use it. Only ~25% of the 4
000 requests repeat one of 200 popular queries; the rest carry order numbers
or user names and are unique, so the cache gains one 96 KiB tensor for almost
every request and never evicts anything: memory grows linearly with the number
of requests, without bound. The cached tensors grow by ~77 KiB per request on
average (80% of requests miss); RSS grows faster, ~135 KiB per request and
steadily (~1.8x), because the 96 KiB blocks sit in the malloc heap between
freed temporaries. A correct diagnosis reports linear growth per request held
by the lru_cache of `encode` (tensors), and advises bounding the cache
(`maxsize=...`), caching only the pooled 384-float vector, or normalising
queries before caching.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "request",
    "rate_key": "growth_per_request",
    "rate_tolerance": 0.45,
    "holder": "encode",
    "memory_kind": "tensors",
    "advice": "bound the lru_cache (maxsize) or cache only the pooled vector",
    "findings": ["leak"],
    "absent": ["reference-cycles", "worker-private-growth", "optimizer-state-heavy",
               "activations-dominate"],
    "words": ["encode"],
    "no_words": ["DataLoader", "optimizer"],
    "holder_bytes_key": "cache_bytes",
}
"""
import functools
import gc
import random
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
random.seed(0)
VOCAB, DIM, MAX_LEN, N_DOCS, N_REQUESTS = 8_192, 384, 64, 20_000, 4_000


class QueryEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(MAX_LEN, DIM) * 0.02)
        layer = nn.TransformerEncoderLayer(DIM, 6, 2 * DIM, dropout=0.0, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids):
        return self.layers(self.tok(ids) + self.pos[: ids.shape[1]])


def tokenize(text):
    ids = [zlib.crc32(w.encode()) % VOCAB for w in text.lower().split()][:MAX_LEN]
    return torch.tensor(ids + [0] * (MAX_LEN - len(ids)))[None]


encoder = QueryEncoder().eval()
doc_index = F.normalize(torch.randn(N_DOCS, DIM), dim=-1)


@functools.lru_cache(maxsize=None)
def encode(text):
    with torch.inference_mode():
        return encoder(tokenize(text))[0]


def handle(query):
    states = encode(query)
    with torch.inference_mode():
        q = F.normalize(states.mean(0), dim=-1)
        scores, top = (doc_index @ q).topk(10)
    return top.tolist()


popular = [f"how do i {verb} my {thing}" for verb in
           ("reset", "cancel", "update", "track", "return", "change", "renew", "close",
            "open", "verify") for thing in
           ("password", "order", "subscription", "address", "card", "account", "plan",
            "invoice", "refund", "delivery", "email", "phone", "profile", "device",
            "booking", "ticket", "payment", "license", "backup", "settings")]
names = ["ana", "bo", "chen", "dara", "eli", "fatima", "gus", "hana", "ivan", "jo"]


def next_query(i):
    if random.random() < 0.25:
        return random.choice(popular)
    if random.random() < 0.5:
        return f"where is order {random.randrange(10**7):07d} placed on {random.randrange(1, 29)} may"
    return f"{random.choice(names)}{random.randrange(10**5)} cannot log in after update {i}"


rss_start, rss = _truth.rss_bytes(), {}
for i in range(1, N_REQUESTS + 1):
    handle(next_query(i))
    rss[i] = _truth.rss_bytes()
    if i % 1000 == 0:
        info = encode.cache_info()
        print(f"request {i} cache size {info.currsize} hits {info.hits}")

info = encode.cache_info()
# lru_cache has no public view of its values: find the cached (64, 384) states
cache_bytes = _truth.storage_bytes(o for o in gc.get_objects()
                                   if type(o) is torch.Tensor and o.shape == (MAX_LEN, DIM))
_truth.write(
    unit="request",
    requests=N_REQUESTS,
    cache_entries=info.currsize,
    cache_hits=info.hits,
    cache_bytes=cache_bytes,
    cache_bytes_per_request=cache_bytes / N_REQUESTS,
    rss_start=rss_start,
    rss_request_200=rss[200],
    rss_end=_truth.rss_bytes(),
    rss_every_500_requests=[rss[s] for s in range(500, N_REQUESTS + 1, 500)],
    growth_per_request=(rss[N_REQUESTS] - rss[200]) / (N_REQUESTS - 200),
    growth_per_request_second_half=(rss[N_REQUESTS] - rss[N_REQUESTS // 2]) / (N_REQUESTS // 2),
)
