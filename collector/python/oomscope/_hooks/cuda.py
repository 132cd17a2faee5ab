"""CUDA, from the moment the program initialises it (never before, never by us): attaching the
caching allocator's OOM observer initialises CUDA, which would break a program that forks
first, so it waits for torch's own `_lazy_init`. With `--oom-snapshot` the allocator's history of
live blocks (Python stacks) is recorded from then on.
"""

from oomscope._hooks.errors import interrupted, replace
from oomscope._hooks.oom import observer
from oomscope._hooks.state import S


def patch_lazy_init():
    def make(original):
        def _lazy_init():
            original()
            if not S.cuda.ready:
                ready_check()
        return _lazy_init

    replace(S.torch.cuda, "_lazy_init", make)


def ready_check():
    """Whether the program initialised CUDA; the first time it has, the observer goes on."""
    torch = S.torch
    try:
        if not torch.cuda.is_initialized():
            return
    except BaseException:
        return
    S.cuda.ready = True
    try:
        if S.cuda.snapshot:
            torch.cuda.memory._record_memory_history(
                enabled="state", context="state", stacks="python")
    except BaseException:
        S.cuda.snapshot = False
    try:
        torch._C._cuda_attach_out_of_memory_observer(observer)
    except BaseException as e:
        interrupted(e)
