"""Text-generation service doing beam search that returns full per-step scores.

A small GRU language model (vocabulary 16000) serves generation requests; each
request asks for its own ``beam_size`` (1-16) and ``max_new_tokens``
(20-120).  Like ``generate(output_scores=True)``, the decoder keeps the
processed next-token log-probabilities of every beam at every step so that it
can return them: it allocates ``all_scores = torch.full((max_new_tokens,
beam_size, VOCAB), -inf)`` at the start of each request and fills one slice
per step.  The buffer is released when the request returns.

Correct diagnosis: memory is not leaking - between requests it returns to the
same level - but the peak of each request follows the size of the request:
about max_new_tokens x beam_size x VOCAB x 4 bytes (``peak_bytes_per_beam_token``
per beam-token), up to ``max_request_peak_bytes`` for the largest requests.  It
is held by the per-request ``all_scores`` buffer of full-vocabulary scores.
Fix (only if the peak matters): return only the top-k scores (or just the
chosen tokens' scores) per step instead of the full-vocabulary distribution,
and/or cap beam_size x max_new_tokens per request.

(Allocator note: buffers under ~30 MiB can be served from heap memory freed by
earlier, larger requests, so small requests may show almost no visible peak,
and the level between requests wanders by up to ~60 MiB without growing.)

EXPECT = {
    "symptom": "follows_input",
    "unit": "request",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "all_scores",
    "memory_kind": "tensors",
    "advice": "Keep only the top-k (or chosen-token) scores per step instead of the full-vocabulary all_scores buffer, or cap beam_size x max_new_tokens per request.",
    "findings": ["input-peak"],
    "absent": ["leak", "model-copies", "reference-cycles"],
    "words": [],
    "no_words": ["grows without bound", "unbounded growth"],
    "peak_key": "max_request_peak_bytes",
    "flat_rate_key": "between_requests_slope_per_request",
}
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _truth  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.manual_seed(0)

REQUESTS = _truth.pick(200, 12)
VOCAB = 16_000
EMB = 128
HIDDEN = 128
EOS = 0
BEAMS = [1, 2, 4, 8, 16]


class GRULM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMB)
        self.cell = nn.GRUCell(EMB, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def step(self, tokens, h):
        h = self.cell(self.embed(tokens), h)
        return torch.log_softmax(self.head(h), -1), h


@torch.no_grad()
def beam_search(model, prompt, beam_size, max_new_tokens):
    h = torch.zeros(1, HIDDEN)
    for tok in prompt:
        _, h = model.step(tok.view(1), h)
    h = h.expand(beam_size, -1).contiguous()
    tokens = prompt[-1].repeat(beam_size)
    beam_scores = torch.zeros(beam_size)
    beam_scores[1:] = -1e9
    sequences = torch.empty(beam_size, 0, dtype=torch.long)
    all_scores = torch.full((max_new_tokens, beam_size, VOCAB), float("-inf"))
    for t in range(max_new_tokens):
        logp, h = model.step(tokens, h)
        logp[:, EOS] = -1e9            # force full-length outputs
        all_scores[t] = logp
        cand = (beam_scores[:, None] + logp).view(-1)
        best, idx = cand.topk(beam_size)
        origin = idx // VOCAB
        tokens = idx % VOCAB
        beam_scores = best
        h = h[origin]
        sequences = torch.cat([sequences[origin], tokens[:, None]], 1)
    return sequences[0], beam_scores[0].item(), all_scores


def main():
    g = torch.Generator().manual_seed(1)
    model = GRULM().eval()
    plan = []
    for _ in range(REQUESTS):
        beam = BEAMS[int(torch.randint(0, len(BEAMS), (1,), generator=g))]
        length = int(torch.randint(20, 121, (1,), generator=g))
        plan.append((beam, length))
    sizes, peaks, inside, between = [], [], [], []
    floor = _truth.Floor()
    for i, (beam, length) in enumerate(plan):
        prompt = torch.randint(1, VOCAB, (8,), generator=g)
        before = _truth.rss()
        _truth.reset_peak()
        seq, score, all_scores = beam_search(model, prompt, beam, length)
        inside.append(_truth.rss() - before)
        floor.sample()
        response = {"tokens": seq.tolist(), "score": score,
                    "scores_shape": list(all_scores.shape)}
        del all_scores
        peaks.append(_truth.hwm() - before)
        sizes.append(beam * length)
        between.append(_truth.rss())
        floor.end_unit()
        if i % 20 == 0:
            print(f"request {i:3d}  beam {beam:2d}  len {length:3d}  "
                  f"peak +{peaks[-1] / _truth.MiB:6.1f} MiB  rss {between[-1] / _truth.MiB:7.1f} MiB  "
                  f"score {response['score']:.2f}")

    big = max(range(len(sizes)), key=lambda k: sizes[k])
    _truth.write(
        requests=REQUESTS,
        request_sizes_beam_tokens=sizes,
        request_peaks_bytes=peaks,
        max_request_peak_bytes=max(peaks),
        largest_request_beam_tokens=sizes[big],
        largest_request_peak_bytes=peaks[big],
        largest_request_buffer_bytes=sizes[big] * VOCAB * 4,
        peak_bytes_per_beam_token=_truth.slope(sizes, peaks),
        expected_bytes_per_beam_token=VOCAB * 4,
        peak_size_correlation=_truth.correlation(sizes, peaks),
        inside_size_correlation=_truth.correlation(sizes, inside),
        between_requests_slope_per_request=_truth.tail_slope(between, 0.1),
        between_requests_min=min(between),
        between_requests_max=max(between),
        **floor.summary("request"),
    )


if __name__ == "__main__":
    main()
