"""A real PyTorch loop whose evaluation needs more memory than its training (knows nothing about
oomscope): a small classifier over many classes, evaluated every `--eval-every` steps under
torch.no_grad() on `--eval-batches` batches whose logits are all collected and concatenated
(`torch.cat(all_logits)`) to compute the accuracy at the end — the pattern behind "eval OOMs
hours in". Nothing is kept after an eval."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-batches", type=int, default=30)
    p.add_argument("--classes", type=int, default=8192)
    p.add_argument("--batch", type=int, default=256)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, a.classes))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(a.steps):
        x, y = torch.randn(a.batch // 8, 64), torch.randint(0, a.classes, (a.batch // 8,))
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % a.eval_every == 0:
            model.eval()
            all_logits, all_labels = [], []
            with torch.no_grad():
                for _ in range(a.eval_batches):
                    xb = torch.randn(a.batch, 64)
                    all_logits.append(model(xb))
                    all_labels.append(torch.randint(0, a.classes, (a.batch,)))
            logits, labels = torch.cat(all_logits), torch.cat(all_labels)
            accuracy = (logits.argmax(-1) == labels).float().mean().item()
            del all_logits, all_labels, logits, labels
            model.train()
            print("step %d accuracy %.4f" % (step + 1, accuracy))


if __name__ == "__main__":
    main()
