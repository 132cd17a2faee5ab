"""An OOM kill in eval (issue 42, case 5): an MLP trained for 100 steps, then an eval that keeps
every batch's logits on the host (`all_logits.append(...)`, to `torch.cat` them at the end for a
metric), run inside a memory cgroup too small for them (640 MiB: some 20 eval batches before the
kill with the debug collector in the cgroup too, room for the leak watch's pair of counts after
8 rising batches): the kernel's OOM killer ends it during the eval. No DataLoader, no workers:
what filled the limit is the eval's list. The program writes its truth as it goes (the steps it
trained, the bytes its list held at its last eval batch, 8 MiB a batch), since it does not live
to write it at the end. The peak's breakdown must not count the gradients that
`zero_grad(set_to_none=True)` freed before the eval.

EXPECT = {
    "cgroup_mib": 640,
    "killed": True,
    "findings": ["host-memory-pressure"],
    "absent": ["worker-private-growth", "worker-cow"],
    "words": ["all_logits", "eval"],
    "no_words": ["DataLoader workers", "prefetch_factor", "copy-on-write", "+ gradients"],
    "run_up_per_batch": "all_logits",
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

all_logits = []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--classes", type=int, default=32768)
    p.add_argument("--eval-batches", type=int, default=400)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, a.classes))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(a.steps):
        x, y = torch.randn(8, 256), torch.randint(0, a.classes, (8,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _truth.write(steps=a.steps, eval_kept_bytes=0)
    model.eval()
    with torch.no_grad():
        for b in range(a.eval_batches):
            # 64 x 32768 float32 logits: 8 MiB a batch, kept
            all_logits.append(model(torch.randn(64, 256)))
            kept = _truth.storage_bytes(all_logits)
            _truth.write(steps=a.steps, eval_batches=b + 1, eval_kept_bytes=kept,
                         kept_bytes_per_batch=kept / (b + 1))
    logits = torch.cat(all_logits)
    print("eval logits", tuple(logits.shape))


if __name__ == "__main__":
    main()
