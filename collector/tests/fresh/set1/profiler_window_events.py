"""Training a small transformer LM under torch.profiler with a repeating schedule.

A 2-layer decoder-only transformer (d=128, seq 64, batch 8) trains on
synthetic tokens with Adam for 180 steps while torch.profiler runs with
`schedule(wait=2, warmup=1, active=3, repeat=0)`: every 6 steps it records 3
steps and calls `on_trace_ready`. The handler, `keep_window`, appends the
window's raw event list (`prof.events()`, ~5 800 FunctionEvent objects with
their input shapes) to `windows` so that per-operator statistics over the
whole run can be aggregated at the end. The profiler itself frees each
window's data when the next one starts, but `windows` keeps every window's
events, so memory climbs by one window's worth of Python objects (~17 MB, ~3
KB per event) every 6 steps: a fine staircase that is linear growth of ~2.9 MB
per optimizer step, without bound (~450 MB over the run). Tensor memory is
flat. A correct diagnosis reports linear growth held by `windows` (the
profiler's FunctionEvent objects, Python objects), and advises aggregating
each window as it arrives (e.g. keep `prof.key_averages()` or write a trace
file with tensorboard_trace_handler) instead of keeping raw events.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "growth_per_step",
    "rate_tolerance": 0.33,
    "holder": "windows",
    "memory_kind": "python_objects",
    "advice": "aggregate each profiler window (key_averages) or write traces to disk instead of keeping prof.events()",
    "findings": ["leak"],
    "absent": ["reference-cycles", "worker-private-growth", "eval-retains-memory"],
    "words": ["profiler"],
    "no_words": ["DataLoader"],
}
"""
import sys
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

import _truth

torch.manual_seed(0)
VOCAB, SEQ, DIM, BATCH, STEPS = 512, 64, 128, 8, 180


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        layer = nn.TransformerEncoderLayer(DIM, 4, 4 * DIM, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(DIM, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.out(self.blocks(h, mask=self.mask, is_causal=True))


model = TinyLM()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
data = torch.randint(0, VOCAB, (4096, SEQ + 1))
windows = []


def keep_window(prof):
    windows.append(prof.events())


rss_start, rss = _truth.rss_bytes(), {}
with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=2, warmup=1, active=3, repeat=0),
             on_trace_ready=keep_window) as prof:
    for step in range(1, STEPS + 1):
        batch = data[torch.randint(0, len(data), (BATCH,))]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
        rss[step] = _truth.rss_bytes()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} windows {len(windows)}")

totals = defaultdict(float)
for events in windows:
    for e in events:
        totals[e.name] += e.cpu_time_total
top = sorted(totals.items(), key=lambda kv: -kv[1])[:5]
print("top ops:", [name for name, _ in top])

n_events = sum(len(w) for w in windows)
sample = windows[-1]
per_event = sum(sys.getsizeof(e) + sys.getsizeof(e.__dict__) + sys.getsizeof(e.input_shapes)
                for e in sample) / len(sample)
_truth.write(
    unit="optimizer_step",
    optimizer_steps=STEPS,
    profiler_windows=len(windows),
    events_kept=n_events,
    events_per_window=n_events / len(windows),
    approx_bytes_per_event_getsizeof=per_event,
    rss_start=rss_start,
    rss_step_30=rss[30],
    rss_end=_truth.rss_bytes(),
    rss_every_30_steps=[rss[s] for s in range(30, STEPS + 1, 30)],
    growth_per_step=(rss[STEPS] - rss[30]) / (STEPS - 30),
)
