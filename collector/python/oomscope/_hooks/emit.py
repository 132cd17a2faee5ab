"""Sending a mark: the stage, step and phase the hooks decided, unless the program marks that
stage itself, and only from a process that marks (DataLoader workers never do: their marks would
repeat the trainer's). Also the program's own marks, heard through the probe's listener: from the
first one on, a stage, the steps, the phases or the breakdown are the program's to say.
"""

import os

from oomscope._hooks import cuda
from oomscope._hooks.errors import interrupted
from oomscope._hooks.memory import stage_breakdown
from oomscope._hooks.state import S


def emit(stage, phase, always=False):
    if S.paused:
        return
    if S.active is None:
        S.active = decide_active()
    if not S.active:
        return
    loop = S.loop
    loop.stage = stage
    loop.last_phase = phase
    if not loop.marking and phase == "train" and not always:
        return  # an iteration not marked (`budget`; evals and checkpoints always are)
    program = S.program
    if stage in program.stages:
        return
    program.emitted[stage] = loop.step
    if not S.cuda.ready and not loop.iterations:
        # CUDA initialised before our patch of `_lazy_init` saw it: looked for in the first
        # iteration, then once an iteration (`optimizer`), not at every mark (~1 us each).
        cuda.ready_check()
    S.probe.hook_mark(stage, None if program.steps else loop.step,
                      None if program.phases else phase, S.cuda.ready)
    if S.memory.stage_breakdown_at is not None:
        stage_breakdown()


def decide_active():
    """Whether this process marks: not a DataLoader worker. A process with RANK, LOCAL_RANK or
    WORLD_SIZE says so once in a note."""
    try:
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            return False
    except BaseException as e:
        interrupted(e)
    ids = [(key, os.environ.get(env)) for key, env in
           (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE"))]
    ids = [(k, v) for k, v in ids if v is not None]
    if ids:
        S.probe.note("zero-code hooks in pid %d: %s" % (
            os.getpid(), " ".join("%s=%s" % kv for kv in ids)))
    return True


class ProgramMarks:
    """The probe's listener (`oomscope._probe.listen`): what the program sends itself."""

    @staticmethod
    def user_mark(stage):
        """The program marks `stage` itself: from now on we do not. True when we already marked
        it in this step, so that the probe does not send it twice."""
        S.program.stages.add(stage)
        return S.program.emitted.pop(stage, None) == S.loop.step

    @staticmethod
    def user_step():
        S.program.steps = True

    @staticmethod
    def user_phase():
        S.program.phases = True

    @staticmethod
    def user_components():
        S.program.components = True
