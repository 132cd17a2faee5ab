"""A diffusion-style PyTorch loop (knows nothing about oomscope) whose memory is known exactly: a
trained denoiser (with batch-norm buffers) under AdamW, an EMA copy of it, a frozen encoder run
under no_grad. After the first optimizer step it writes what torch itself counts — the bytes of
each group of tensors, summed over their storages — to `--expect` as JSON, for the test to hold
the collector's breakdown against.

`--where globals`: the models are the script's global variables; `--where function`: locals of
`main()` (what Python before 3.13 cannot name without keeping a function's variables alive)."""

import argparse
import copy
import json

import torch
import torch.nn as nn
import torch.nn.functional as F


class Denoiser(nn.Module):
    def __init__(self, z, hidden):
        super().__init__()
        self.inp = nn.Linear(z, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.out = nn.Linear(hidden, z)

    def forward(self, x):
        return self.out(F.silu(self.norm(self.inp(x))))


class Encoder(nn.Module):
    def __init__(self, d, z):
        super().__init__()
        self.proj = nn.Linear(d, z)

    def forward(self, x):
        return self.proj(x)


def nbytes(tensors):
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def build(a):
    torch.manual_seed(0)
    encoder = Encoder(a.d, a.z).to(a.device).requires_grad_(False).eval()
    model = Denoiser(a.z, a.hidden).to(a.device)
    ema = copy.deepcopy(model).requires_grad_(False).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return encoder, model, ema, opt


def train(a, encoder, model, ema, opt):
    for step in range(a.steps):
        x = torch.randn(a.batch, a.d, device=a.device)
        with torch.no_grad():
            latents = encoder(x)
        noise = torch.randn_like(latents)
        loss = F.mse_loss(model(latents + noise), noise)
        loss.backward()
        opt.step()
        if step == 0 and a.expect:
            state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
            with open(a.expect, "w") as f:
                json.dump({
                    "parameters_bytes": nbytes(model.parameters()),
                    "buffers_bytes": nbytes(model.buffers()),
                    "gradients_bytes": nbytes(p.grad for p in model.parameters()),
                    "optimizer_state_bytes": nbytes(state),
                    "ema_bytes": nbytes(list(ema.parameters()) + list(ema.buffers())),
                    "encoder_bytes": nbytes(encoder.parameters()),
                    # on CUDA, what the allocator holds for tensors now
                    "allocated_bytes": torch.cuda.memory_allocated() if a.device == "cuda" else None,
                }, f)
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for e, m in zip(ema.parameters(), model.parameters()):
                e.lerp_(m, 0.01)
    print("steps %d loss %.4f" % (a.steps, loss.item()))


def arguments():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--z", type=int, default=256)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--where", choices=["globals", "function"], default="globals")
    p.add_argument("--device", default="cpu")
    p.add_argument("--expect")
    return p.parse_args()


def main(a):
    encoder, model, ema, opt = build(a)
    train(a, encoder, model, ema, opt)


if __name__ == "__main__":
    args = arguments()
    if args.where == "function":
        main(args)
    else:
        encoder, model, ema, opt = build(args)
        train(args, encoder, model, ema, opt)
