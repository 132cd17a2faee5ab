"""When the hooks look at what the memory is, and what they send of it: the model's breakdown
(`breakdown`) at the end of iterations 1, 4, 16, 64, ... and stage by stage through the
iteration after the first, and what holds a leak (`held`) while memory keeps rising: at
iterations' ends, at the forwards of a program that never trains, at an eval's batches. Each look is bounded so that its share of the run stays small.
"""

import gc
import sys
import time

from oomscope._hooks import breakdown, held, objects
from oomscope._hooks.budget import iteration_ended
from oomscope._hooks.errors import interrupted, ours
from oomscope._hooks.state import S

# After a breakdown, the next one waits until this many times its own cost has passed: the
# breakdown's share of the run stays under 0.1% however short the steps (a 5 ms loop paid 0.2 ms
# a step over 2 000 steps on the 4^k schedule alone: each costs ~75 ms on a 2-core VM).
BREAKDOWN_COST_FACTOR = 1000


def live_optimizers():
    return [o for o in (ref() for ref in list(S.loop.optimizers.values())) if o is not None]


def known_modules():
    """The live modules the registry saw (and the roots), dead entries dropped; None without the
    registry (an older torch): the breakdown then looks through every object."""
    memory = S.memory
    if not memory.registry:
        return None
    for ref in S.fwd.roots:
        root = ref()
        if root is not None:
            memory.modules[id(root)] = ref
    live = []
    for key, ref in list(memory.modules.items()):
        module = ref()
        if module is None:
            del memory.modules[key]
        else:
            live.append(module)
    return live


def _send(b, gradients, state, optimizers):
    S.probe.measured_components(
        parameters_bytes=b["parameters_bytes"], buffers_bytes=b["buffers_bytes"],
        gradients_bytes=gradients, optimizer_state_bytes=state, step=S.step_field(),
        extras=b["extras"], optimizers=optimizers, parameter_count=b["parameter_count"],
        trainable_parameter_count=b["trainable_parameter_count"])


def send_breakdown(force=False):
    """The model's memory by component, sent when it changed, and at the first OOM whatever it is
    (`force`: an OOM in the first step would otherwise have none)."""
    if not S.active or S.paused or S.program.components:
        return
    try:
        b = breakdown.measure(S.torch, live_optimizers(), sys._getframe(1), known_modules())
    except BaseException as e:
        interrupted(e)
        return
    if b == S.memory.breakdown_sent and not force:
        return
    S.memory.breakdown_sent = b
    _send(b, b["gradients_bytes"], b["optimizer_state_bytes"], b["optimizers"])


def at_iteration_end():
    """An iteration ended: the breakdown when due (each no sooner than `BREAKDOWN_COST_FACTOR`
    times the last one's cost after it), then the leak watch."""
    memory = S.memory
    iterations = S.loop.iterations
    now = time.monotonic()
    iteration_ended(now)
    # The optimizers took parameters since the last breakdown (a parameter group added, layers
    # unfrozen, an optimizer made): the model's state changed, measured at once. Two `len`s an
    # optimizer: nothing a step would notice.
    seen = tuple((len(o.param_groups), len(o.state)) for o in live_optimizers())
    changed = memory.optimizers_seen is not None and seen != memory.optimizers_seen
    if (iterations >= memory.breakdown_at or changed) and now >= memory.breakdown_not_before:
        memory.optimizers_seen = seen
        memory.breakdown_at = iterations * 4
        start = now
        send_breakdown()
        if iterations == 1 and memory.breakdown_sent is not None:
            # The next iteration, stage by stage: what its gradients and optimizer state are.
            memory.stage_breakdown_at = iterations
            memory.stage_sent = None
        memory.breakdown_not_before = start + (time.monotonic() - start) * (1 + BREAKDOWN_COST_FACTOR)
    if memory.eval_sent:
        # The breakdown sent at the last eval's start: training's gradients and state again.
        memory.eval_sent = False
        _send_moment(force=True)
    watch_held(now)


def stage_breakdown():
    """At each mark of the iteration after the first breakdown: the breakdown with that moment's
    gradients and optimizer state, sent at its first mark and then when they change (zero_grad
    frees the gradients, backward makes them); the analysis reads it stage by stage."""
    memory = S.memory
    if S.loop.iterations != memory.stage_breakdown_at:
        memory.stage_breakdown_at = None
        return
    if not _send_moment():
        memory.stage_breakdown_at = None


def _send_moment(force=False):
    """The last breakdown with this moment's gradients and optimizer state, sent unless they are
    what this sent last (`force`: sent whatever they are); False when there is none to send (no
    breakdown yet, or it failed)."""
    memory = S.memory
    b = memory.breakdown_sent
    if b is None or S.program.components or S.paused:
        return False
    try:
        gradients, per_optimizer = breakdown.within_iteration(S.torch, live_optimizers())
    except BaseException as e:
        interrupted(e)
        return False
    now = (gradients, per_optimizer)
    if now == memory.stage_sent and not force:
        return True
    memory.stage_sent = now
    labels = b.get("optimizer_labels") or {}
    _send(b, gradients, sum(n for _, n in per_optimizer),
          sorted((labels.get(key, "optimizer"), n) for key, n in per_optimizer))
    return True


def gc_freed(generation, collected, freed_bytes, pause_us):
    """A collection freed memory (`cycles.GcWatch`)."""
    if S.paused or not S.active:
        return
    S.probe.gc(generation, collected, freed_bytes, pause_us)


def at_inference_forward():
    """An outermost forward of a program that has not trained (a serving or inference loop): the
    forward is its clock, for the leak watch as for the analysis (`leaks::Clock::Forward`)."""
    loop = S.loop
    _watch(S.memory.watch, time.monotonic(), loop.evals, loop.evals, "forward")


def at_eval_forward():
    """An outermost forward of an eval within a training program: the eval's own leak watch, on
    its batches (what an eval keeps of each batch, its outputs appended for a metric at the end,
    fills memory before the eval ends: an OOM in it is explained by it). A new watch for each
    eval (one at another step); its rows go out on the `eval` clock, numbered from the eval's
    first batch."""
    memory = S.memory
    loop = S.loop
    if memory.watch is None:
        return
    if memory.eval_watch is None or memory.eval_watch_step != loop.step:
        # An eval begins: what the gradients and optimizer state are during it (zero_grad with
        # set_to_none at the end of a step left none; without it they stay), so that the
        # breakdown of a peak in the eval counts what is there; the next iteration's end sends
        # training's again.
        start = time.monotonic()
        if start >= memory.eval_moment_not_before and _send_moment(force=True):
            memory.eval_sent = True
            memory.eval_moment_not_before = start + (time.monotonic() - start) * \
                BREAKDOWN_COST_FACTOR
        memory.eval_watch = held.Watch(apart=held.EVAL_APART, gap_s=0.0, rises=held.EVAL_RISES)
        memory.eval_watch.training = False
        memory.eval_watch_step = loop.step
        memory.eval_watch_base = loop.evals - 1
    batch = loop.evals - memory.eval_watch_base
    _watch(memory.eval_watch, time.monotonic(), batch, batch, "eval")


def watch_held(now):
    """At an iteration's end: one memory reading; while it keeps rising, two counts of the live
    tensors some iterations apart, and what grew between them (`held`)."""
    loop = S.loop
    _watch(S.memory.watch, now, loop.iterations, loop.step, "step")


def _watch(watch, now, clock, position, label):
    """The leak watch `watch` at one tick of `clock` (iterations, an inference program's
    forwards, an eval's batches: `label` says which), `position` the step (or forward, or batch)
    the rows are sent at."""
    if not S.active or S.paused or watch is None:
        return
    training = label == "step"
    loop = S.loop
    try:
        if label != "eval" and watch.training != training:
            # A program that evaluated before it trained: its readings and counts were on the
            # forwards' clock, not the iterations'.
            watch.training = training
            watch.first = None
            watch.readings = []
        if training and watch.evals_seen != loop.evals:
            # Memory settles for a few steps after an eval (the C allocator takes in what it
            # freed): rises counted from the last eval on, and a count never made then (its own
            # allocations, at the top of the heap, would keep glibc from trimming what the eval
            # freed).
            watch.evals_seen = loop.evals
            watch.readings = []
        if watch.first is not None:
            # A pair under way: its second count is due by the clock alone, no reading needed.
            due = watch.due(clock, None)
        elif now < watch.next_reading_s or (
                now < S.memory.readings_paced_until and (label != "eval" or clock < 2)):
            # (A rise is seen as well over several iterations as over one.) An eval reads each
            # of its batches from the second on: its watch needs `EVAL_RISES` in a row inside
            # one eval. Its first batch is paced like the rest: a loop whose every step runs one
            # no-grad forward (an agent acting) begins a one-batch eval a step.
            return
        else:
            started = time.thread_time()  # this thread's own CPU: ctypes lets others run
            reading = held.memory_now(S.torch, S.cuda.ready)
            # The floor's reading: the same on CUDA; on the host the resident bytes, which see
            # the Python objects' own arenas (obtained with mmap, not malloc: glibc's count
            # misses them).
            floor = reading if S.cuda.ready else held.rss_bytes()
            # Readings no more often than `READING_COST_SHARE` of the time allows: glibc's
            # count walks its free lists, ~0.7 ms in a heap of many freed tensors.
            took = time.thread_time() - started
            watch.next_reading_s = now + watch.gap_s
            S.memory.readings_paced_until = now + took / held.READING_COST_SHARE
            due = watch.due(clock, reading, floor)
        if due is None:
            return
        # The program's frame, never one of ours: a local holding its own frame is a reference
        # cycle that would keep the census's list of every tensor (and so tensors the program
        # has dropped) alive until the garbage collector runs.
        frame = program_frame()
        # No collection in the middle of a count: the census's own lists would set one off, and
        # it would free the reference cycles that hold the new tensors before their holders are
        # looked for (then found held by no container).
        collecting = gc.isenabled()
        gc.disable()
        try:
            _count(watch, frame, clock, position, label, due, training, loop)
        finally:
            if collecting:
                gc.enable()
    except BaseException as e:
        interrupted(e)
    finally:
        frame = None


def _count(watch, frame, clock, position, label, due, training, loop):
    """The leak watch's count `due` ('first' or 'second') at `clock`, and the rows of a pair."""
    count = kept = None
    try:
        count = held.census(S.torch, frame)
        kept = objects.containers(S.torch, frame)
        if due == "first":
            # Not the tensors or containers themselves; the evals so far, to tell one between
            # the counts.
            watch.first = (clock, position, count[:2], loop.evals, objects.keep_only_lengths(kept))
            del count, kept
            return
        iteration, step, first, evals, first_kept = watch.first
        if training and evals != loop.evals:
            # An eval ran between the counts: what grew is what it kept (the analysis's
            # eval-retains-memory), not what each step keeps. Start over.
            watch.first = None
            watch.readings = []
            return
        watch.done(clock)
        steps = clock - iteration
        rows = held.grown(S.torch, frame, first, count, steps)
        rows += objects.objects_grown(S.torch, first_kept, kept, steps)
        del first, count, first_kept, kept
        for row in rows:
            S.probe.held(row.kind, row.count, row.bytes, step, position, row.device, row.dtype,
                         row.shape, row.grad_fn, row.holder, row.items, label)
    finally:
        count = kept = first = first_kept = None


def program_frame():
    """The innermost frame that is not one of ours (torch's optimizer hook machinery, then the
    program)."""
    frame = sys._getframe(1)
    while frame is not None and ours(frame.f_code.co_filename):
        frame = frame.f_back
    return frame
