"""A generation server's loop (issue 42, case 1): a small transformer decoder under `eval()` and
`inference_mode()`, no optimizer; each request decodes a few tokens and the server keeps every
request's key/value tensors in a module-level list (`kv_log`) "for a later cache". Nothing is
trained; memory grows by the same amount each request. With no training, the clock is the
forward (8 a request here): the rate is checked per forward, against the resident bytes the
program gained over its requests after the first (`/proc/self/statm`: the kept tensors' 2.44 MiB
a request plus what the C allocator keeps around them).

EXPECT = {
    "findings": ["leak"],
    "absent": ["eval-peak", "eval-retains-memory", "reference-cycles"],
    "words": ["/forward", "kv_log"],
    "no_words": ["has no step marks", "autograd graph", ".item()", "eval before the first step"],
    "rate_per": "forward",
}
"""

import argparse

import torch
import torch.nn as nn

import _truth

kv_log = []


class Decoder(nn.Module):
    def __init__(self, vocab, dim, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(nn.Linear(dim, 2 * dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        h = self.emb(ids)
        kv = []
        for layer in self.layers:
            k, v = layer(h).chunk(2, dim=-1)
            kv.append((k.contiguous(), v.contiguous()))
            h = torch.tanh(h + v)
        return self.head(h[:, -1]), kv


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=80)
    p.add_argument("--tokens", type=int, default=8)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Decoder(vocab=1000, dim=512, layers=4).eval()
    kept = 0
    rss_after_first = None  # the first request warms up (the allocator's first pages)
    with torch.inference_mode():
        for r in range(a.requests):
            ids = torch.randint(0, 1000, (4, 32))
            for _ in range(a.tokens):
                logits, kv = model(ids)
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
            kv_log.append(kv)
            kept += _truth.storage_bytes([t for pair in kv for t in pair])
            if r == 0:
                rss_after_first = _truth.rss_bytes()
    forwards = a.requests * a.tokens
    _truth.write(requests=a.requests, forwards=forwards,
                 tensor_bytes_per_request=kept / a.requests,
                 kept_bytes_per_forward=(_truth.rss_bytes() - rss_after_first)
                 / (forwards - a.tokens))
    print("served %d requests, kept %d tensors" % (a.requests, 8 * len(kv_log)))


if __name__ == "__main__":
    main()
