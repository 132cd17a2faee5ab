"""A small, real PyTorch training program for oomscope's zero-code tests: it knows nothing about
oomscope. A GPT-style transformer (token + position embeddings, pre-norm blocks, causal
self-attention, AdamW) trained on a fixed synthetic sequence task, on CPU.

Options select what real programs do: eval under no_grad, gradient accumulation, activation
checkpointing, torch.compile, bf16 autocast, a DataLoader with worker processes, a planted leak
(the classic `total = total + loss`, which keeps every step's graph alive, or a plain list of
tensors), an uncatchable host allocation failure. It prints one line per epoch and the final
loss, so runs with and without the collector can be compared byte for byte.
"""

import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d, heads, ckpt):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.ckpt = ckpt

    def _forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))

    def forward(self, x, mask):
        if self.ckpt and self.training:
            return checkpoint(self._forward, x, mask, use_reentrant=False)
        return self._forward(x, mask)


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq, ckpt=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, ckpt) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))


class Tokens(torch.utils.data.Dataset):
    """Sequences of a repeating pattern (learnable), generated per index."""

    def __init__(self, n, seq, vocab):
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        start = (i * 7) % self.vocab
        x = (torch.arange(self.seq + 1) * 3 + start) % self.vocab
        return x[:-1], x[1:]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=2)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", choices=["none", "wrap", "method"], default="none")
    p.add_argument("--bf16", action="store_true", help="CPU autocast to bfloat16")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--mp-context", default=None, help="DataLoader workers: fork or spawn")
    p.add_argument("--leak", choices=["none", "graph", "list"], default="none")
    p.add_argument("--leak-mib", type=float, default=4.0, help="--leak list: MiB kept per step")
    p.add_argument("--host-oom", action="store_true", help="end with an impossible allocation")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--oom-step", type=int, default=-1,
                   help="at this step, after the forward, ask for 1.5x the free device memory")
    p.add_argument("--save-every", type=int, default=0,
                   help="torch.save a checkpoint (model and optimizer state) every N steps")
    p.add_argument("--save-path", default="checkpoint.pt")
    p.add_argument("--report", default=None,
                   help="write torch.cuda.memory_stats() after every backward and optimizer step, "
                        "and the OOM's text, to this JSON file (what users print by hand)")
    args = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    report = {"after_backward": [], "after_step": [], "oom": None}

    def note(where):
        if args.report and cuda:
            stats = torch.cuda.memory_stats()
            report[where].append({k: stats.get(k) for k in (
                "allocated_bytes.all.current", "reserved_bytes.all.current")})

    def save():
        if args.report:
            import json
            with open(args.report, "w") as f:
                json.dump(report, f)

    model = GPT(args.vocab, args.d, args.layers, args.heads, args.seq, ckpt=args.checkpoint)
    model.to(device)
    if args.compile == "method":
        model.compile()
    run = torch.compile(model) if args.compile == "wrap" else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = Tokens(args.steps * args.accum * args.batch, args.seq, args.vocab)
    loader = torch.utils.data.DataLoader(
        data, batch_size=args.batch, num_workers=args.workers,
        multiprocessing_context=args.mp_context if args.workers else None)

    kept = []
    total = 0.0
    step = 0
    micro = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            logits = run(x)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.view(-1))
        if step == args.oom_step and cuda:
            free, _ = torch.cuda.mem_get_info()
            try:  # an accidental broadcast: far more than the device has free
                logits.new_empty(int(free * 1.5) // logits.element_size())
            except torch.OutOfMemoryError as e:
                report["oom"] = str(e)
                save()
                raise
        (loss / args.accum).backward()
        note("after_backward")
        if args.leak == "graph":
            total = total + loss  # keeps every step's graph (and its activations) alive
        micro += 1
        if micro % args.accum:
            continue
        opt.step()
        note("after_step")
        opt.zero_grad(set_to_none=True)
        if args.leak == "list":
            kept.append(torch.ones(int(args.leak_mib * (1 << 20)) // 4))
        step += 1
        if args.save_every and step % args.save_every == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                       args.save_path)
        if args.eval_every and step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                val = sum(F.cross_entropy(run(x).view(-1, args.vocab), y.view(-1)).item()
                          for _ in range(args.eval_batches)) / args.eval_batches
            model.train()
            print("step %d eval loss %.4f" % (step, val))
        if step >= args.steps:
            break
    save()
    print("final loss %.4f after %d steps" % (loss.item(), step))
    if args.host_oom:
        torch.empty(1 << 50, dtype=torch.float32)  # 4 PiB: no host has it
    sys.stdout.flush()


if __name__ == "__main__":
    main()
