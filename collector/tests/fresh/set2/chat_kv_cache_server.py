"""A multi-turn chat endpoint around a small decoder-only transformer.  To avoid
re-encoding the whole conversation on every turn, the server keeps each
conversation's KV cache in ``self.sessions[session_id]`` and continues
generation from it on the next turn.  Idle sessions are evicted after a
30-minute timeout, as is usual for chat backends.

What a correct memory diagnosis says: memory grows linearly with the number
of requests served (about half a megabyte per request) and never comes back.
Every request appends its prompt and generated tokens' keys/values (4 layers
x K and V) to a session in ``self.sessions``, and conversations that have
ended are never dropped: the only eviction is the idle timeout, which is far
longer than the traffic pattern (many short conversations), so in practice
every finished conversation's KV cache stays in memory.  Fix: drop the
session's cache when the conversation ends (or keep an LRU with a byte
budget), rather than relying on the idle timeout.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "request",
    "rate_key": "rate_bytes_per_request",
    "rate_tolerance": 0.33,
    "holder": "self.sessions",
    "memory_kind": "tensors",
    "advice": "Evict a session's KV cache when its conversation ends, or bound the session cache by bytes (LRU).",
    "findings": ["leak"],
    "absent": ["reference-cycles", "optimizer-state-heavy", "model-copies", "eval-retains-memory", "worker-private-growth", "activations-dominate"],
    "words": ["sessions"],
    "no_words": ["DataLoader", "optimizer"],
    "holder_bytes_key": "kv_cache_bytes",
}
"""
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
VOCAB, DIM, HEADS, LAYERS, MAX_POS = 4096, 256, 4, 4, 2048


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x, past):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, -1)
        q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None and t > 1)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, DIM))
        x = x + self.mlp(self.ln2(x))
        return x, (k, v)


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_POS, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, past=None):
        start = 0 if past is None else past[0][0].shape[2]
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.shape[1]))
        new_past = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, None if past is None else past[i])
            new_past.append(kv)
        return self.head(self.ln(x[:, -1])), new_past


class Session:
    def __init__(self):
        self.past = None
        self.turns = 0
        self.last_seen = time.monotonic()


class ChatServer:
    def __init__(self, model, idle_timeout_s=30 * 60):
        self.model = model.eval()
        self.sessions = {}
        self.idle_timeout_s = idle_timeout_s

    def _evict_idle(self):
        now = time.monotonic()
        for sid in [s for s, sess in self.sessions.items() if now - sess.last_seen > self.idle_timeout_s]:
            del self.sessions[sid]

    @torch.inference_mode()
    def handle(self, session_id, prompt_ids, max_new_tokens=16, temperature=0.8):
        self._evict_idle()
        sess = self.sessions.setdefault(session_id, Session())
        logits, past = self.model(torch.tensor([prompt_ids]), sess.past)
        out = []
        for _ in range(max_new_tokens):
            nxt = torch.multinomial((logits / temperature).softmax(-1), 1)
            out.append(int(nxt))
            logits, past = self.model(nxt, past)
        sess.past, sess.turns, sess.last_seen = past, sess.turns + 1, time.monotonic()
        return out


def traffic(n_requests, concurrent=8, seed=0):
    """Interleaved short conversations: 1-4 turns each, 24-64 token prompts."""
    rng = random.Random(seed)
    next_id, live = 0, {}
    for _ in range(n_requests):
        while len(live) < concurrent:
            live[f"conv-{next_id}"] = rng.randint(1, 4)
            next_id += 1
        sid = rng.choice(sorted(live))
        yield sid, [rng.randrange(VOCAB) for _ in range(rng.randint(24, 64))]
        live[sid] -= 1
        if live[sid] == 0:
            del live[sid]  # the user closed the chat window


def main(n_requests=850):
    server = ChatServer(TinyGPT())
    marks = []
    for r, (sid, prompt) in enumerate(traffic(n_requests), start=1):
        server.handle(sid, prompt)
        if r % 25 == 0:
            marks.append((r, _truth.rss()))
        if r % 400 == 0:
            print(f"{r} requests, {len(server.sessions)} sessions kept")
    kv = [t for s in server.sessions.values() for layer in s.past for t in layer]
    kv_bytes = _truth.storage_bytes(kv)
    tokens = sum(s.past[0][0].shape[2] for s in server.sessions.values())
    warm = [(n, b) for n, b in marks if n >= 100]
    _truth.write(
        requests=n_requests,
        sessions_kept=len(server.sessions),
        cached_tokens=tokens,
        kv_cache_bytes=kv_bytes,
        kv_bytes_per_request=kv_bytes / n_requests,
        rate_bytes_per_request=_truth.slope(*zip(*warm)),
        growth_bytes=warm[-1][1] - warm[0][1],
        rss_series=[[n, b] for n, b in marks[::4]],
    )


if __name__ == "__main__":
    main()
