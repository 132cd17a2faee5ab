"""Measures what a Llama-style model really keeps, with torch on the CPU, for
collector/tests/estimate_vs_torch.rs: its parameter count, the bytes autograd saves for backward
in one training step (saved-tensor hooks, each storage counted once, parameters excluded) plus the
16-bit logits the loss holds, and AdamW's state after one step. Written for this test (plain
torch, the layout of Hugging Face's LlamaForCausalLM: RMSNorm upcast to fp32, SwiGLU, grouped-query
attention through SDPA, an fp32 copy of the logits for the loss), knowing nothing of oomscope.

Usage: python llama_memory.py CONFIG.json SEQ_LEN BATCH  -> one JSON line on stdout."""
import json
import sys

import torch
import torch.nn.functional as F

config = json.load(open(sys.argv[1]))
s, b = int(sys.argv[2]), int(sys.argv[3])
h, L = config["hidden_size"], config["num_hidden_layers"]
a, kv = config["num_attention_heads"], config["num_key_value_heads"]
i, V = config["intermediate_size"], config["vocab_size"]
hd = h // a
dt = torch.bfloat16
torch.manual_seed(0)


def weight(*shape):
    return torch.nn.Parameter(torch.randn(*shape, dtype=dt) * 0.02)


def ones(n):
    return torch.nn.Parameter(torch.ones(n, dtype=dt))


layers = [
    dict(q=weight(a * hd, h), k=weight(kv * hd, h), v=weight(kv * hd, h), o=weight(h, a * hd),
         gate=weight(i, h), up=weight(i, h), down=weight(h, i), n1=ones(h), n2=ones(h))
    for _ in range(L)
]
embed, norm, head = weight(V, h), ones(h), weight(V, h)
params = [embed, norm, head] + [p for layer in layers for p in layer.values()]


def rms(x, w):
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * xf.to(x.dtype)


def block(x, p):
    y = rms(x, p["n1"])
    q = F.linear(y, p["q"]).view(b, s, a, hd).transpose(1, 2)
    k = F.linear(y, p["k"]).view(b, s, kv, hd).transpose(1, 2)
    v = F.linear(y, p["v"]).view(b, s, kv, hd).transpose(1, 2)
    k = k.repeat_interleave(a // kv, dim=1)
    v = v.repeat_interleave(a // kv, dim=1)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
    x = x + F.linear(o, p["o"])
    y = rms(x, p["n2"])
    return x + F.linear(F.silu(F.linear(y, p["gate"])) * F.linear(y, p["up"]), p["down"])


tokens = torch.randint(0, V, (b, s))
saved = {}
param_storages = {p.untyped_storage().data_ptr() for p in params}


def pack(t):
    key = t.untyped_storage().data_ptr()
    if key not in param_storages:
        saved[key] = max(saved.get(key, 0), t.untyped_storage().nbytes())
    return t


with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    x = F.embedding(tokens, embed)
    for p in layers:
        x = block(x, p)
    logits = F.linear(rms(x, norm), head)
    loss = F.cross_entropy(logits.float().view(-1, V), tokens.view(-1))
activations = sum(saved.values()) + logits.untyped_storage().nbytes()
loss.backward()
optimizer = torch.optim.AdamW(params, lr=1e-4)
optimizer.step()
state = sum(t.untyped_storage().nbytes() for st in optimizer.state.values()
            for t in st.values() if torch.is_tensor(t) and t.dim() > 0)
print(json.dumps({
    "parameters": sum(p.numel() for p in params),
    "activations_bytes": activations,
    "optimizer_bytes": state,
}))
