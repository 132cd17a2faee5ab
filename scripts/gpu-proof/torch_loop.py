"""GPU proof workload: a plain PyTorch training loop (an MLP on random data) with oomscope marks.

Right after every mark it writes down torch.cuda.memory_stats() as PyTorch reports it at that
point (nothing is allocated in between), so the proof can compare the trace with PyTorch itself.
With --oom-step N, step N makes a request larger than the free device memory mid-step (an
accidental broadcast after the forward pass, as real code does): PyTorch's own error text is
written to the report, then the error is raised again, so the program dies of it as it would
without oomscope.

usage: torch_loop.py --report PATH [--steps N] [--width N] [--batch N] [--oom-step N]
"""

import argparse
import json

import torch

import oomscope_probe as oom

STATS = ("allocated_bytes.all.current", "reserved_bytes.all.current", "allocated_bytes.all.peak")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--oom-step", type=int, default=-1)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    report = {"device": device, "marks": [], "oom": None}

    def mark(stage, step=None):
        oom.mark(stage, step=step)
        stats = torch.cuda.memory_stats() if cuda else {}
        report["marks"].append({"stage": stage, "step": step, **{k: stats.get(k) for k in STATS}})

    def save():
        with open(args.report, "w") as f:
            json.dump(report, f)

    torch.manual_seed(0)
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(w, 4 * w), torch.nn.GELU(), torch.nn.Linear(4 * w, w)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mark("model_ready")
    report["parameters"] = [p.numel() * p.element_size() for p in model.parameters()]
    for step in range(args.steps):
        oom.step(step)
        x = torch.randn(args.batch, w, device=device)
        mark("pre_forward", step)
        y = model(x)
        mark("post_forward", step)
        if step == args.oom_step:
            free, total = torch.cuda.mem_get_info() if cuda else (0, 0)
            # batch × width × k floats: more than is free, less than the whole device (an OOM
            # that a smaller batch would avoid, not an impossible request).
            k = max(1, (free + (total - free) // 2) // (4 * args.batch * w))
            report["oom_request_bytes"] = 4 * args.batch * w * k
            report["free_bytes_before"], report["total_bytes"] = free, total
            try:
                y = (y.unsqueeze(2).expand(args.batch, w, k).contiguous() * 0.5).sum(2)
            except torch.OutOfMemoryError as e:
                report["oom"] = str(e)
                save()
                raise
        loss = y.square().mean()
        loss.backward()
        mark("post_backward", step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("post_optimizer_step", step)
    report["loss"] = float(loss)
    save()


if __name__ == "__main__":
    main()
