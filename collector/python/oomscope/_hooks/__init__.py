"""oomscope's zero-code PyTorch hooks: stage marks, steps, phases, the model's memory and the OOM
moment from an unmodified training script. The bootstrap (`sitecustomize.py`) imports this
package right after the program imports torch and calls `install`; nothing here runs before
that, and nothing here raises into the program (`errors`).

One module for each thing watched: `forward` (the outermost forward, the phase, frozen
forwards), `backward`, `optimizer` (the step count), `epochs` (a DataLoader begun again), `save`
(checkpoints), `inputs` (each step's input size), `cuda` and `oom` (the allocator's OOM
observer, host allocation failures), `memory` (when to measure), `breakdown` (what the model's
memory is), `held` (what holds a leak), `cycles` (what the garbage collector frees), `modules`
(what is patched on `nn.Module`); `state` holds what they know, `emit` sends a mark. They send through the process's probe
(`oomscope._probe`), which hears the program's own marks for them (`emit.ProgramMarks`).

On CUDA (only once the program initialised it: this package never does) every mark carries the
caching allocator's statistics. DataLoader workers never mark; forked children start over with
their own step count. Marks carry the pid and RANK (the probe adds them).
"""

import os

from oomscope import _probe
from oomscope._hooks import (cuda, cycles, epochs, forward, held, memory, modules, oom,
                             optimizer, save)
from oomscope._hooks.emit import ProgramMarks
from oomscope._hooks.errors import interrupted
from oomscope._hooks.state import S


def install(torch):
    """Called once, right after `import torch` finished."""
    S.torch = torch
    S.cuda.snapshot = os.environ.get("OOMSCOPE_OOM_SNAPSHOT") == "1"
    S.cuda.snapshot_prefix = os.environ.get("OOMSCOPE_OOM_SNAPSHOT_PREFIX") or None
    S.probe = _probe.default_probe()
    if not S.probe.enabled:
        return
    _probe.listen(ProgramMarks)
    _watch_program_end(S.probe)
    try:
        import gc

        gc.callbacks.append(cycles.GcWatch(torch, memory.gc_freed))
        S.memory.watch = held.Watch()
    except BaseException as e:  # the marks go on without the leak census
        interrupted(e)
    import warnings

    # Our global hooks make torch warn on every `torch.compile(module)` call; the warning is
    # about us, not the program, and must not appear on its stderr.
    warnings.filterwarnings(
        "ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
    if not hasattr(torch, "compiler") or not hasattr(torch.compiler, "is_compiling"):
        return  # older than the torch these hooks know (2.1+): record from outside only
    os.register_at_fork(after_in_child=_after_fork)
    forward.bind(torch)
    forward.search()
    optimizer.install()
    # Each patch on its own: one that this torch does not support leaves the others in place.
    for patch in (modules.patch_train, optimizer.patch_optimizer_init, modules.patch_getstate,
                  modules.patch_jit, modules.patch_compile, optimizer.patch_grad_scaler,
                  cuda.patch_lazy_init, oom.patch_excepthook, save.patch_save,
                  modules.patch_registry, epochs.patch_dataloader):
        try:
            patch()
        except BaseException as e:
            interrupted(e)


def _watch_program_end(probe):
    """Sends the moment the program's own code ends (its main module returned, raised or called
    `sys.exit`): what memory does after it, in `atexit` handlers and the interpreter's teardown,
    is not the run's. `threading`'s exit callbacks run first in the interpreter's shutdown,
    before `atexit`'s (Python 3.9+); `atexit` where they are missing. A forked child leaves
    through `os._exit` and sends nothing; a spawned one is a program of its own."""
    pid = os.getpid()

    def ended():
        if os.getpid() == pid:
            try:
                probe.program_end()
            except BaseException:
                pass

    try:
        import threading

        threading._register_atexit(ended)
    except BaseException:
        import atexit

        atexit.register(ended)


def _after_fork():
    """A forked child (a DataLoader worker, a fork-started rank) starts over."""
    try:
        S.after_fork(held.Watch())
    except BaseException as e:
        interrupted(e)


# --- measuring our own cost (scripts/measure_zero_code.py) ------------------------------------

def pause():
    """Takes every hook off the program's path (forward hooks removed; the optimizer and
    backward hooks return at once), so that the same process can be timed with and without."""
    forward.remove_all()
    S.paused = True


def resume_with(probe):
    """`resume()`, sending through `probe` from now on (the notebook extension loaded again: a
    new collector attached to the same process)."""
    S.probe = probe
    resume()


def resume():
    """Undoes `pause()`: back to hooks on the roots, or to the search when none is known yet."""
    S.paused = False
    if S.fwd.mode == "roots" and S.fwd.roots:
        forward.roots_only()
    else:
        forward.search()
