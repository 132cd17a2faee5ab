"""A real PyTorch loop stopped by Ctrl-C (knows nothing about oomscope): at step 2 a SIGINT
arrives while backward runs in C++ (sent by a timer thread a moment after backward starts, as a
user's Ctrl-C would), so Python raises KeyboardInterrupt at the first Python code the main
thread runs after it. The traceback must read the same with and without the collector."""

import os
import signal
import sys
import threading

import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    width = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(4):
        loss = model(torch.randn(1024, width)).pow(2).mean()
        if step == 2:
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print("step", step, flush=True)


if __name__ == "__main__":
    main()
