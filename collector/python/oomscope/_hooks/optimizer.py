"""`pre_optimizer_step` / `post_optimizer_step` (torch's global optimizer step hooks), and the step
count. An iteration ends when every optimizer the program created has stepped since the last one
ended, so a GAN's discriminator and generator steps, an actor-critic pair or a WGAN's five
critic steps and one generator step count once, however forwards interleave with them (an
optimizer that keeps not stepping while another steps `IDLE_AFTER` times is set aside until it
steps). Micro-batches under gradient accumulation are several forwards and backwards in one
step; a step GradScaler skips (inf/NaN gradients) fires no optimizer hook and is sent as a note.
A program with no torch optimizer at all (weights updated by hand) counts a step at every
training forward that follows a backward (`forward`). The next step begins at the next training
forward (or optimizer step, when the step runs its forward in a closure): an eval after the last
step is not a step.
"""

import weakref

from oomscope._hooks import cuda
from oomscope._hooks.emit import emit
from oomscope._hooks.errors import interrupted, replace
from oomscope._hooks.inputs import flush_input
from oomscope._hooks.memory import at_iteration_end
from oomscope._hooks.state import S

IDLE_AFTER = 8  # steps of one optimizer, another never stepping, before that one is set aside
CUDA_CHECK_EVERY = 64  # iterations between two looks for a CUDA the hooks did not see start


def install():
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    register_optimizer_step_pre_hook(_opt_pre)
    register_optimizer_step_post_hook(_opt_post)


def _opt_pre(optimizer, args, kwargs):
    try:
        _step_began(optimizer)
    except BaseException as e:
        interrupted(e)
    return None


def _step_began(optimizer):
    if S.paused:
        return
    loop = S.loop
    if loop.in_opt_step and id(optimizer) == loop.opt_outer:
        loop.in_opt_step = 0  # its last step raised (a caught OOM): the post hook never ran
    loop.in_opt_step += 1
    loop.stepped.add(id(optimizer))  # every level: a wrapper and the optimizer it steps
    loop.idle.discard(id(optimizer))
    if loop.in_opt_step == 1:
        loop.opt_outer = id(optimizer)
        if loop.step_pending:
            # The iteration's first event is its optimizer step: `optimizer.step(closure)` runs
            # the forward and backward inside it (Lightning, LBFGS), so the step begins here.
            loop.step_pending = False
            loop.step += 1
        emit("pre_optimizer_step", "train")


def _opt_post(optimizer, args, kwargs):
    try:
        _step_ended(optimizer)
    except BaseException as e:
        interrupted(e)
    return None


def _step_ended(optimizer):
    if S.paused:
        return
    loop = S.loop
    loop.in_opt_step = max(loop.in_opt_step - 1, 0)
    if loop.in_opt_step:
        return
    loop.opt_steps_applied += 1
    if not S.cuda.ready and not loop.iterations % CUDA_CHECK_EVERY:
        # CUDA initialised where our patch of `_lazy_init` did not see it (C++): looked for now
        # and then.
        cuda.ready_check()
    emit("post_optimizer_step", "train")
    loop.train_forward_in_step = False
    loop.frozen_seq = []
    # The next step begins with the next training forward, once this step of this optimizer ends
    # the iteration.
    if iteration_done(optimizer):
        loop.step_pending = True
        loop.iterations += 1
        flush_input()
        at_iteration_end()


def iteration_done(optimizer):
    """Whether every optimizer the program created has stepped since the iteration began; a
    created one that has not while this one stepped more than `IDLE_AFTER` times (a leftover, or
    one for a later phase) is set aside until it steps."""
    loop = S.loop
    key = id(optimizer)
    if len(loop.optimizers) == 1 and key in loop.optimizers:
        loop.stepped.clear()  # one optimizer: each of its steps ends an iteration
        return True
    loop.repeats[key] = loop.repeats.get(key, 0) + 1
    stepped, idle = loop.stepped, loop.idle
    waiting = [k for k, ref in loop.optimizers.items()
               if k not in stepped and k not in idle and ref() is not None]
    if waiting and loop.repeats[key] > IDLE_AFTER:
        idle.update(waiting)
        waiting = []
    if waiting:
        return False
    stepped.clear()
    loop.repeats.clear()
    return True


def patch_optimizer_init():
    """Knowing that the program has a torch optimizer tells how to count steps: by its steps, or
    (a loop that updates weights by hand) by training forwards that follow a backward."""
    def make(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            loop = S.loop
            loop.has_optimizer = True
            try:
                for key in [k for k, ref in loop.optimizers.items() if ref() is None]:
                    del loop.optimizers[key]
                loop.optimizers[id(self)] = weakref.ref(self)
                loop.idle.discard(id(self))  # (the id of one that was set aside and is gone)
            except BaseException as e:
                interrupted(e)
        return __init__

    replace(S.torch.optim.Optimizer, "__init__", make)


def patch_grad_scaler():
    try:
        from torch.amp.grad_scaler import GradScaler
    except BaseException:
        return

    def make(original):
        def step(self, optimizer, *args, **kwargs):
            before = S.loop.opt_steps_applied
            result = original(self, optimizer, *args, **kwargs)
            try:
                if S.loop.opt_steps_applied == before and self.is_enabled() and S.active:
                    S.probe.note("GradScaler skipped the optimizer step at step %d (inf/NaN "
                                 "gradients)" % S.loop.step)
            except BaseException as e:
                interrupted(e)
            return result
        return step

    replace(GradScaler, "step", make)
