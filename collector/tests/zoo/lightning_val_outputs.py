"""Lightning's `validation_step_outputs` never cleared (issue 42, case 9): a classifier trained
for 5 epochs with a validation after each whose `validation_step` appends every batch's logits
to `self.validation_step_outputs` for `on_validation_epoch_end`, which reads them and forgets
`.clear()`. ~48 MiB kept at each validation, flat inside the training epochs: the staircase is
the bug, and its advice is to clear the list. The program counts the bytes its list holds.

EXPECT = {
    "findings": ["eval-retains-memory"],
    "absent": ["leak", "reference-cycles", "worker-private-growth"],
    "words": ["clear", "first the one counted: list `validation_step_outputs`"],
}
"""

import argparse
import os
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("PL_DISABLE_FORK", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import lightning as L  # noqa: E402

import _truth  # noqa: E402


class Classifier(L.LightningModule):
    def __init__(self, d, classes):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 256), nn.ReLU(), nn.Linear(256, classes))
        self.validation_step_outputs = []
        self.validations = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        logits = self(x)
        self.validation_step_outputs.append(logits)
        return F.cross_entropy(logits, y)

    def on_validation_epoch_end(self):
        preds = torch.cat(self.validation_step_outputs)
        self.log("val_max", preds.max())
        self.validations += 1
        # (forgets self.validation_step_outputs.clear())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    d, classes, batch = 64, 1536, 512

    def data(n):
        x = torch.randn(n * batch, d)
        y = torch.randint(0, classes, (n * batch,))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)

    model = Classifier(d, classes)
    trainer = L.Trainer(max_epochs=a.epochs, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, data(16), data(16))
    kept = _truth.storage_bytes(model.validation_step_outputs)
    _truth.write(epochs=a.epochs, validations=model.validations,
                 kept_bytes_per_eval=kept / max(model.validations, 1))
    print("validations %d kept %d MiB" % (model.validations, kept >> 20))


if __name__ == "__main__":
    main()
