"""A chat endpoint that keeps each conversation's key/value cache (knows nothing about oomscope):
`Server.sessions` maps a conversation to a `Session` whose `past` is a list of one (key, value)
tuple per layer, replaced by a longer one at every turn. Conversations are never evicted, so the
dict keeps growing; each conversation's tensors have a length of their own. The server lives in
`main`'s locals, not in a global. Prints the number of conversations kept.
"""

import argparse
import random

import torch
import torch.nn as nn

LAYERS, HEADS, DIM = 4, 4, 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.kv = nn.Linear(DIM, 2 * DIM)

    def forward(self, x, past):
        k, v = self.kv(x).view(1, HEADS, -1, 2 * DIM // HEADS).chunk(2, dim=-1)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        return x, (k, v)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, x, past=None):
        new_past = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])
            new_past.append(kv)
        return x, new_past


class Session:
    def __init__(self):
        self.past = None
        self.turns = 0


class Server:
    def __init__(self, model):
        self.model = model
        self.sessions = {}

    def handle(self, conversation, tokens):
        session = self.sessions.setdefault(conversation, Session())
        _, session.past = self.model(torch.randn(1, tokens, DIM), session.past)
        session.turns += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=400)
    args = p.parse_args()
    random.seed(0)
    torch.manual_seed(0)
    server = Server(Model().eval())
    with torch.inference_mode():
        for r in range(args.requests):
            # Mostly new conversations, some coming back for another turn.
            conversation = r if r < 8 or random.random() < 0.7 else random.randrange(r)
            server.handle(conversation, random.randrange(96, 160))
    print(len(server.sessions), "conversations kept")


if __name__ == "__main__":
    main()
