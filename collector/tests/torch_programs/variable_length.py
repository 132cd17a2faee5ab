"""A real PyTorch language-model loop over batches of variable length (knows nothing about
oomscope): token batches of `--batch` sequences, most `--length` tokens long, and every
`--long-every`-th step one `--long-factor` times longer (a corpus with a few long documents,
padded per batch). The model is called with `input_ids=` as Hugging Face models are, so the
hooks must find the tokens through the embedding. Prints the last loss."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids):
        return self.head(self.blocks(self.embed(input_ids)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--long-every", type=int, default=0, help="0: every batch the same length")
    p.add_argument("--long-factor", type=int, default=8)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    vocab = 512
    model = TinyLM(vocab, 128, 2).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(a.steps):
        length = a.length
        if a.long_every and step % a.long_every == a.long_every - 1:
            length *= a.long_factor
        tokens = torch.randint(0, vocab, (a.batch, length + 1), device=a.device)
        logits = model(input_ids=tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("steps %d loss %.4f" % (a.steps, loss.item()))


if __name__ == "__main__":
    main()
