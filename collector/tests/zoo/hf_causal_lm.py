"""A Hugging Face Trainer fine-tuning a tiny random-weight causal LM (Llama-style, 2 layers, 64
wide) with gradient accumulation (4 micro-batches an optimizer step), evaluating every 10 steps.
Nothing is kept across steps: no leak, no eval keeping memory. The steps are the optimizer's:
the program counts its own through a callback (`on_step_end`).

EXPECT = {
    "absent": ["leak", "eval-retains-memory", "reference-cycles", "worker-private-growth"],
    "no_words": ["after the last mark", "has no step marks"],
    "evals": 3,
}
"""

import argparse
import os
import tempfile
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,  # noqa: E402
                          TrainingArguments)
from transformers.utils import logging as hf_logging  # noqa: E402

import _truth  # noqa: E402

hf_logging.disable_progress_bar()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Count(TrainerCallback):
    steps = 0
    evals = 0

    def on_step_end(self, args, state, control, **kw):
        Count.steps += 1

    def on_evaluate(self, args, state, control, **kw):
        Count.evals += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    vocab, seq = 2048, 64
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=seq)
    model = LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=a.steps, per_device_train_batch_size=4,
                                 gradient_accumulation_steps=4, per_device_eval_batch_size=16,
                                 eval_strategy="steps", eval_steps=10, save_strategy="no",
                                 logging_strategy="no", report_to=[], use_cpu=True,
                                 disable_tqdm=True, seed=0, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(1024, seq, vocab, 1),
                          eval_dataset=Tokens(64, seq, vocab, 2), callbacks=[Count()])
        trainer.train()
    _truth.write(steps=Count.steps, evals=Count.evals)
    print("steps %d evals %d" % (Count.steps, Count.evals))


if __name__ == "__main__":
    main()
