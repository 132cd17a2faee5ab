"""An eval whose freed memory the C allocator hands back a few steps late: `eval_concat_fits`'s
eval (every 40 steps, each batch's logits kept in a list and concatenated, then dropped) in a
program that fights RSS growth the way forum threads advise: glibc told not to trim its heap by
itself (`mallopt`; its dynamic thresholds end up there after a few large frees) and
`malloc_trim(0)` called by the logger when it flushes, three training steps after each eval.
The 8 MiB logits come from the heap, so host RSS stays ~190 MiB up for those three training steps,
then falls. That is the eval's memory, not training's: the eval needs more than training,
nothing is kept, and the training peak must not count those steps.

EXPECT = {
    "findings": ["eval-peak"],
    "absent": ["leak", "eval-retains-memory", "reference-cycles"],
    "words": ["batch by batch", "handed back late"],
    "evals": 2,
}
"""

import argparse
import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    a = p.parse_args()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 8192))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    val = [torch.randn(256, 128) for _ in range(24)]
    evals, flush_at, accuracies, handed_back = 0, None, [], []
    for step in range(1, a.steps + 1):
        if step == flush_at:
            held = _truth.rss_bytes()
            libc.malloc_trim(0)
            handed_back.append(held - _truth.rss_bytes())
        x, y = torch.randn(32, 128), torch.randint(0, 8192, (32,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 40 == 0:
            model.eval()
            with torch.no_grad():
                all_logits = [model(v) for v in val]  # 8 MiB a batch, from the heap
                accuracies.append(torch.cat(all_logits).argmax(1).float().mean().item())
            del all_logits
            model.train()
            evals += 1
            flush_at = step + 4
    _truth.write(steps=a.steps, evals=evals)
    # What the allocator held until the logger's trim after the first eval.
    print("acc %.4f; the trim handed back %d MiB" % (accuracies[-1], handed_back[0] >> 20))


if __name__ == "__main__":
    main()
