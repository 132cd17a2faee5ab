"""Wide tabular regression model whose validation loop forgets torch.no_grad().

The model reads 4096 hashed features per row through residual low-rank blocks
(LayerNorm -> 4096x128 -> GELU -> 128x4096, added back).  Training runs small
batches (128 rows).  At the end of every epoch ``evaluate()`` puts the model
in eval mode and runs the validation set in ONE big batch of 2048 rows ("no backward needed, so a bigger batch is fine") - but
without ``torch.no_grad()``/``inference_mode()``.  Autograd therefore records
the graph of the validation forward pass and keeps every block's activations
alive until the loss is turned into a float, then frees them.

Correct diagnosis: no leak - the resident level between epochs is flat and
validation gives its memory back when it ends - but every validation pass
makes a transient peak (about ``eval_peak_above_level`` bytes above the level
before it) that stands far above training's own peak
(``train_peak_above_level``).  The peak is the activations autograd saves for
a backward pass that never comes.  Fix: wrap the validation loop in
``torch.no_grad()`` (or ``torch.inference_mode()``); then the big batch needs
only about one layer's activations at a time.

EXPECT = {
    "symptom": "transient_peak",
    "unit": "epoch",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": None,
    "memory_kind": "tensors",
    "advice": "Run evaluate() under torch.no_grad() (or torch.inference_mode()) so the validation forward pass does not keep activations for backward.",
    "findings": ["eval-peak"],
    "absent": ["leak", "eval-retains-memory", "model-copies", "reference-cycles"],
    "words": ["no_grad"],
    "no_words": ["grows without bound", "unbounded growth"],
    "peak_key": "eval_peak_above_level",
    "flat_rate_key": "rss_floor_slope_per_epoch",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)

EPOCHS = _truth.pick(20, 3)
STEPS_PER_EPOCH = _truth.pick(10, 3)
TRAIN_BATCH = 128
VAL_ROWS = _truth.pick(2048, 512)
FEAT = 4096
RANK = 128
BLOCKS = 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(FEAT)
        self.ff = nn.Sequential(nn.Linear(FEAT, RANK), nn.GELU(), nn.Dropout(0.1),
                                nn.Linear(RANK, FEAT))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(BLOCKS)])
        self.out = nn.Linear(FEAT, 1)

    def forward(self, x):
        return self.out(self.blocks(x)).squeeze(1)


def target_fn(x, w):
    return torch.tanh(x @ w) + 0.5 * torch.sin(3 * x[:, 0])


def evaluate(model, val_x, val_y):
    model.eval()
    out = model(val_x)
    loss = F.mse_loss(out, val_y).item()
    model.train()
    return loss


def main():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(FEAT, generator=g) / FEAT ** 0.5
    val_x = torch.randn(VAL_ROWS, FEAT, generator=g)
    val_y = target_fn(val_x, w)
    model = Regressor()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    floor = _truth.Floor()
    eval_peaks, train_peaks, retained = [], [], []
    for epoch in range(EPOCHS):
        start = _truth.rss()
        _truth.reset_peak()
        for _ in range(STEPS_PER_EPOCH):
            x = torch.randn(TRAIN_BATCH, FEAT, generator=g)
            loss = F.mse_loss(model(x), target_fn(x, w))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            floor.sample()
        train_peaks.append(_truth.hwm() - start)
        level = _truth.rss()
        _truth.reset_peak()
        val_loss = evaluate(model, val_x, val_y)
        eval_peaks.append(_truth.hwm() - level)
        after = _truth.rss()
        retained.append(after - level)
        floor.end_unit()
        print(f"epoch {epoch:2d}  train {loss.item():.4f}  val {val_loss:.4f}  "
              f"eval peak +{eval_peaks[-1] / _truth.MiB:6.1f} MiB  "
              f"rss {after / _truth.MiB:7.1f} MiB")

    srt = sorted(eval_peaks[1:] or eval_peaks)
    srt_t = sorted(train_peaks[1:] or train_peaks)
    _truth.write(
        epochs=EPOCHS,
        eval_peaks_bytes=eval_peaks,
        train_peaks_bytes=train_peaks,
        eval_peak_above_level=srt[len(srt) // 2],
        train_peak_above_level=srt_t[len(srt_t) // 2],
        eval_retained_bytes_median=sorted(retained)[len(retained) // 2],
        eval_retained_bytes_max=max(retained),
        rss_floor_slope_per_epoch=floor.rate(skip_frac=0.1),
        **floor.summary("epoch"),
    )


if __name__ == "__main__":
    main()
