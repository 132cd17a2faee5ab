"""Knowledge distillation, DeiT-style (issue 42, case 6): a teacher put in `.eval()` and run
under `torch.no_grad()` inside every training step, its parameters left with `requires_grad`
(the program never freezes them); the student learns from the teacher's logits. No eval at all:
every forward serves a training step.

EXPECT = {
    "absent": ["eval-peak", "eval-retains-memory", "leak"],
    "no_words": ["eval"],
    "evals": 0,
}
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth


def mlp(width, depth):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--teacher-first", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    teacher = mlp(512, 4).eval()
    student = mlp(512, 1)
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
    for step in range(a.steps):
        x = torch.randn(64, 512)
        if a.teacher_first:
            with torch.no_grad():
                t = teacher(x)
            s = student(x)
        else:
            s = student(x)
            with torch.no_grad():
                t = teacher(x)
        loss = F.kl_div(F.log_softmax(s, -1), F.softmax(t, -1), reduction="batchmean")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _truth.write(steps=a.steps, evals=0)
    print("steps %d loss %.4f" % (a.steps, loss.item()))


if __name__ == "__main__":
    main()
