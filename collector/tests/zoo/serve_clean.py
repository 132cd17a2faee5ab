"""A clean inference server's loop: a small encoder under `inference_mode()` answers requests of
varying length and keeps only each answer's argmax as a Python int. Nothing grows: no leak, no
eval story (nothing is trained).

EXPECT = {
    "absent": ["leak", "eval-peak", "eval-retains-memory", "reference-cycles"],
    "no_words": ["has no step marks", "after the last mark"],
}
"""

import argparse

import torch
import torch.nn as nn

import _truth


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=150)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=512, batch_first=True)
    model = nn.Sequential(nn.Embedding(1000, 256), nn.TransformerEncoder(layer, 2),
                          nn.Linear(256, 1000)).eval()
    answers = []
    with torch.inference_mode():
        for r in range(a.requests):
            ids = torch.randint(0, 1000, (1, 16 + (r * 7) % 48))
            answers.append(int(model(ids)[0, -1].argmax()))
    _truth.write(requests=a.requests)
    print("answered %d" % len(answers))


if __name__ == "__main__":
    main()
