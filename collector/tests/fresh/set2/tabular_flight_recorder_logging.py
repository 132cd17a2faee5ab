"""Train an MLP on a stream of tabular batches (dicts of numpy arrays) with a
standard-library "flight recorder" for logs: a ``logging.handlers.MemoryHandler``
that buffers records and only writes them to the log file when an ERROR is
logged or at shutdown.  The loop calls ``log.debug("step %d batch %s", step,
batch)`` every step (free while the level is INFO), and a loss-spike
detector switches the logger to DEBUG when a spike is seen, "to capture the
batches around the instability".

What a correct memory diagnosis says: memory is flat for the first ~40% of
the run; at the loss spike (step ~500) it starts to grow linearly, by about
0.7 MB per step (one 0.5 MB batch plus allocator overhead), until the end:
unbounded growth that starts midway.  The memory is held by ``flight_recorder.buffer``: every buffered
``LogRecord`` keeps its ``args``, i.e. a reference to that step's ``batch``
dict of numpy arrays, because logging formats lazily, only when the records
are flushed.  The 50 000-record capacity is never reached in practice.
Fix: log a summary (shapes, ``row_id`` range, statistics) instead of the
batch object, or give the MemoryHandler a small capacity / pre-format the
message.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "step",
    "rate_key": "rate_after_spike_bytes_per_step",
    "rate_tolerance": 0.33,
    "holder": "flight_recorder.buffer",
    "memory_kind": "python_objects",
    "advice": "Log a small summary of the batch instead of the batch dict itself, or cap the MemoryHandler's capacity.",
    "findings": ["leak"],
    "absent": ["reference-cycles", "eval-retains-memory", "optimizer-state-heavy", "model-copies", "worker-private-growth", "non-finite-gradients"],
    "words": ["flight_recorder"],
    "no_words": ["DataLoader", "reference cycle"],
    "holder_bytes_key": "held_batch_bytes",
    "flat_rate_key": "rate_before_spike_bytes_per_step",
}
"""
import logging
import logging.handlers
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
FEATURES, CLASSES, BATCH = 512, 10, 256

log = logging.getLogger("trainer")
log.setLevel(logging.INFO)
log.propagate = False
log_dir = tempfile.mkdtemp(prefix="tabular_logs_")
file_handler = logging.FileHandler(os.path.join(log_dir, "train.log"))
file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
flight_recorder = logging.handlers.MemoryHandler(
    capacity=50_000, flushLevel=logging.ERROR, target=file_handler, flushOnClose=True)
log.addHandler(flight_recorder)


def batches(n_steps, seed=0, bad_shard=(500, 520)):
    """Synthetic rows: class = argmax of a fixed projection; one corrupted shard."""
    rng = np.random.default_rng(seed)
    proj = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
    for step in range(n_steps):
        x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
        y = (x @ proj).argmax(1).astype(np.int64)
        if bad_shard[0] <= step < bad_shard[1]:
            x *= 40.0  # an upstream unit change in one shard
        yield {"features": x, "label": y,
               "row_id": np.arange(step * BATCH, (step + 1) * BATCH, dtype=np.int64)}


def main(n_steps=1300):
    model = nn.Sequential(nn.Linear(FEATURES, 768), nn.ReLU(), nn.Linear(768, 768), nn.ReLU(),
                          nn.Linear(768, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ema_loss = None
    spike_step = None
    steps, rss = [], []
    for step, batch in enumerate(batches(n_steps)):
        log.debug("step %d batch %s", step, batch)
        x = torch.from_numpy(batch["features"])
        y = torch.from_numpy(batch["label"])
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        value = loss.item()
        if ema_loss is not None and value > 3 * ema_loss and spike_step is None:
            spike_step = step
            log.warning("loss spike at step %d: %.3f (ema %.3f); enabling debug logging", step, value, ema_loss)
            log.setLevel(logging.DEBUG)
        ema_loss = value if ema_loss is None else 0.98 * ema_loss + 0.02 * min(value, 3 * ema_loss)
        if step % 100 == 0:
            log.info("step %d loss %.4f", step, value)
        if step % 10 == 0:
            steps.append(step)
            rss.append(_truth.rss())
    print(f"final loss {ema_loss:.3f}; spike at step {spike_step}; "
          f"{len(flight_recorder.buffer)} buffered log records")

    # what the buffered records keep alive
    held = {}
    for rec in flight_recorder.buffer:
        for a in rec.args if isinstance(rec.args, tuple) else ():
            if isinstance(a, dict):
                for v in a.values():
                    if isinstance(v, np.ndarray):
                        held[id(v)] = v.nbytes
    batch_bytes = BATCH * FEATURES * 4 + BATCH * 8 * 2
    before = [(s, r) for s, r in zip(steps, rss) if 20 <= s < (spike_step or n_steps)]
    after = [(s, r) for s, r in zip(steps, rss) if spike_step is not None and s > spike_step + 10]
    _truth.write(
        spike_step=spike_step,
        n_steps=n_steps,
        buffered_records=len(flight_recorder.buffer),
        held_batch_bytes=sum(held.values()),
        batch_bytes=batch_bytes,
        rate_before_spike_bytes_per_step=_truth.slope(*zip(*before)),
        rate_after_spike_bytes_per_step=_truth.slope(*zip(*after)),
        growth_after_spike_bytes=after[-1][1] - before[-1][1],
        rss_series=[[s, r] for s, r in zip(steps[::5], rss[::5])],
    )
    flight_recorder.close()
    for name in os.listdir(log_dir):
        os.remove(os.path.join(log_dir, name))
    os.rmdir(log_dir)


if __name__ == "__main__":
    main()
