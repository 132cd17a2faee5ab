"""A Hugging Face Trainer program (knows nothing about oomscope): a tiny random-weight GPT-2
(2 layers, 64 wide) fine-tuned as a sequence classifier on synthetic token data, with an
evaluation every `--eval-steps` steps. With `--keep`, its `compute_metrics` appends every eval's
predictions to a module-level list (a common way to "look at them later"): host memory climbs at
each eval. Prints the final metrics."""

import argparse
import os
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import (GPT2Config, GPT2ForSequenceClassification, Trainer,  # noqa: E402
                          TrainingArguments)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()

KEPT = []


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, vocab, (n, seq), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--eval-steps", type=int, default=10)
    p.add_argument("--eval-samples", type=int, default=512)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--out", default="hf-out")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    vocab, seq = 4096, 32
    config = GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=64, n_layer=2, n_head=2,
                        num_labels=2, pad_token_id=0)
    model = GPT2ForSequenceClassification(config)

    def compute_metrics(pred):
        logits, labels = pred.predictions, pred.label_ids
        if a.keep:
            # Keep every eval's raw outputs "for later" (and a widened copy, as plots need):
            # 512 × 2 × 12 288 float64, 96 MiB an eval.
            KEPT.append(np.repeat(logits.astype(np.float64), 12288, axis=1))
        return {"accuracy": float((logits.argmax(-1) == labels).mean())}

    args = TrainingArguments(output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=8,
                             per_device_eval_batch_size=32, eval_strategy="steps",
                             eval_steps=a.eval_steps, save_strategy="no", logging_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
                             dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(2048, seq, vocab, 1),
                      eval_dataset=Tokens(a.eval_samples, seq, vocab, 2),
                      compute_metrics=compute_metrics)
    trainer.train()
    metrics = trainer.evaluate()
    print("accuracy %.3f kept %d" % (metrics["eval_accuracy"], len(KEPT)))


if __name__ == "__main__":
    main()
