"""A PyTorch Lightning program (knows nothing about oomscope): a small MLP classifier on
synthetic data, trained for a few epochs with a validation loop after each. With `--keep`, its
`validation_step` appends every batch's logits to `self.validation_step_outputs` and never clears
the list (the pattern Lightning's own docs warn about): memory climbs at every validation and
stays flat inside the training epochs."""

import argparse
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
import lightning as L  # noqa: E402


class Classifier(L.LightningModule):
    def __init__(self, d, classes, keep):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 512), nn.ReLU(), nn.Linear(512, classes))
        self.keep = keep
        self.validation_step_outputs = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        logits = self(x)
        if self.keep:
            self.validation_step_outputs.append(logits)
        return F.cross_entropy(logits, y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--train-batches", type=int, default=20)
    p.add_argument("--val-batches", type=int, default=20)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--classes", type=int, default=4096)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    d = 64

    def data(n):
        x = torch.randn(n * a.batch, d)
        y = torch.randint(0, a.classes, (n * a.batch,))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=a.batch)

    model = Classifier(d, a.classes, a.keep)
    trainer = L.Trainer(max_epochs=a.epochs, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=2)
    trainer.fit(model, data(a.train_batches), data(a.val_batches))
    print("kept", len(model.validation_step_outputs), "validation outputs")


if __name__ == "__main__":
    main()
