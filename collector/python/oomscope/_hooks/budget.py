"""Which training iterations the hooks mark. Every one while iterations are slow, and the first
`WARMUP_ITERATIONS` of any loop; past them, in a loop faster than `MARK_EVERY_S`, one in `every`
(a power of two, changed only when the loop's pace moves by half or more), plus any iteration
whose input is well above the usual (a rare long batch sets the peak). Evals and checkpoints are
always marked.

Why: a mark costs the program a reading of its own memory (a system call: ~11 us in a loop,
where the kernel's code is out of the caches) and the collector a row; six a step were 0.2 ms of
a 2.5 ms step, and a marked iteration of a 2 ms step costs ~0.25 ms all told (its marks, the
backward watch). Marking an iteration every ~50 ms keeps what the analysis needs (each stage's
memory, step after step, for the stage table and the growth fits) at about 0.5% of the
program's time. The trace says when marking thinned out (`sampling`), so that the step count and the text
stay true. `OOMSCOPE_MARK_INTERVAL_MS` in the program's environment sets the interval (0: every
iteration marked, whatever it costs).
"""

import os

from oomscope._hooks.state import S


def _interval_s():
    """`OOMSCOPE_MARK_INTERVAL_MS` (0: every iteration), else 50 ms."""
    try:
        return max(float(os.environ.get("OOMSCOPE_MARK_INTERVAL_MS", "50")), 0.0) / 1000
    except ValueError:
        return 0.05


WARMUP_ITERATIONS = 100  # iterations all marked first
MARK_EVERY_S = _interval_s()  # about one marked iteration in this long at most, past the warm-up
MAX_EVERY = 64
LONG_INPUT = 1.25  # an input this many times the usual one is a long batch: its iteration is marked
_SMOOTHING = 0.1  # weight of the newest iteration in the running iteration time (and input)


def iteration_ended(now_s):
    """At an iteration's end (`now_s`: time.monotonic()): whether the next one is marked."""
    loop = S.loop
    if loop.iteration_end_s:
        took = now_s - loop.iteration_end_s
        loop.iteration_s = took if loop.iteration_s is None else \
            loop.iteration_s + _SMOOTHING * (took - loop.iteration_s)
    loop.iteration_end_s = now_s
    if loop.iterations < WARMUP_ITERATIONS or not loop.iteration_s:
        loop.marking = True
        return
    every = 1
    while every < MAX_EVERY and every * 2 * loop.iteration_s <= MARK_EVERY_S:
        every *= 2
    # Fewer marked iterations at once; more only when the marked ones are twice too far apart.
    slower = every < loop.mark_every and loop.mark_every * loop.iteration_s > 2 * MARK_EVERY_S
    if every > loop.mark_every or slower:
        if loop.mark_every == 1 and every > 1 and not loop.sampled:
            loop.sampled = True
            import atexit

            atexit.register(_at_exit)
        loop.mark_every = every
        loop.mark_phase = loop.iterations
        S.probe.sampling(every, loop.step + 1, int(loop.iteration_s * 1e6))
    loop.marking = (loop.iterations - loop.mark_phase) % every == 0


def _at_exit():
    """The last step the loop reached (the last marked one may be earlier), as the process ends:
    the trace's step count stays the program's."""
    loop = S.loop
    try:
        S.probe.sampling(loop.mark_every, loop.step + 1, int((loop.iteration_s or 0) * 1e6),
                         last_step=loop.step)
    except Exception:
        pass


def input_seen(elements):
    """A training forward's input: an iteration whose input is well above the usual is marked."""
    inputs = S.inputs
    usual = inputs.usual_elements
    if usual and elements > LONG_INPUT * usual:
        S.loop.marking = True
    inputs.usual_elements = elements if not usual else usual + _SMOOTHING * (elements - usual)
