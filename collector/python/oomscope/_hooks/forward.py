"""`pre_forward` / `post_forward`, `frozen_forward` and the phase: the outermost forward of a
module with parameters. Global forward pre/post hooks with a depth counter find it. Loss modules
(no parameters), forwards re-run inside backward (activation checkpointing:
`_current_graph_task_id() != -1`) and code being traced by `torch.compile`
(`torch.compiler.is_compiling()`) do not count.

Global hooks take every module call off torch's fast path (~4 us a call), so once the roots are
known (`ROOTS_AFTER` outermost forwards with no new root) they are swapped for hooks on the roots
alone; `module.train()/eval()` re-arms the search, since that is when another model (an EMA copy,
a teacher) tends to start running. Once the program has run a compiled graph, the hooks in place
stay as they are: Dynamo guards on the number of global hooks and of a module's hooks, and a
change would compile the graph again (`S.fwd.frozen_hooks`; see `modules.patch_compile`).

The phase is `eval` when the module is not training, grad is off or inference mode is on, except
a `frozen_forward`: a no-grad forward placed inside a training step (a diffusion loop's VAE or
text encoder, a distillation teacher in `eval()` whether or not its parameters could be
trained): after the step's training forward and before its backward, or between an optimizer
step and the next training forward when it is the module the last step began with at that place
(an EMA copy evaluated there now and then is not), or in the first step a module no optimizer
trains (see `_frozen`). One mark, after it returns, in the training phase:
part of the step it serves, never an eval of its own; a step still begins at its training
forward, so a frozen forward that opens a step carries the number of the step before.
"""

import sys
import weakref

from oomscope._hooks.backward import watch_backward
from oomscope._hooks.emit import emit
from oomscope._hooks.errors import interrupted
from oomscope._hooks.inputs import flush_input, take_input
from oomscope._hooks.memory import at_eval_forward, at_inference_forward
from oomscope._hooks.state import S

ROOTS_AFTER = 8  # outermost forwards with no new root before the global hooks go

# torch's functions the hooks call at every forward, looked up once (`bind`): attribute chains
# like `torch.compiler.is_compiling` cost more than the calls in a loop whose code is out of the
# caches.
_is_compiling = _graph_task_id = _grad_enabled = _inference_mode = _Tensor = None
_exc_info = sys.exc_info


def bind(torch):
    """Looks up what the hooks call at every forward (`install`)."""
    global _is_compiling, _graph_task_id, _grad_enabled, _inference_mode, _Tensor
    _is_compiling = torch.compiler.is_compiling
    _graph_task_id = torch._C._current_graph_task_id
    _grad_enabled = torch.is_grad_enabled
    _inference_mode = torch.is_inference_mode_enabled
    _Tensor = torch.Tensor


def _has_params(module):
    """Whether `module` has a parameter; a yes is remembered (`module.parameters()` builds a
    generator over every submodule: ~4 us a forward, and a module keeps its parameters)."""
    known = S.fwd.with_params
    ref = known.get(id(module))
    if ref is not None and ref() is module:
        return True
    for _ in module.parameters():
        if len(known) >= 1024:
            known.clear()  # modules made and dropped all the time (a layer built in the loop)
        known[id(module)] = weakref.ref(module)
        return True
    return False


def _frozen(module):
    """A no-grad forward that serves the training step under way, told by where it runs, not by
    the module's mode or `requires_grad` (a DeiT teacher is put in `eval()` under `no_grad` with
    its parameters still trainable): after the step's own training forward, before the
    optimizer's step; or, before that training forward, a module the last step began with at
    the same place. In the first step, before its training forward, only a module that is not
    trained (no parameter of it can be, or no optimizer holds any): a trained model's forward
    there is an eval before training (Lightning's sanity check) as far as anything yet known
    tells."""
    loop = S.loop
    if not _trained_yet(loop):
        return False  # an inference program, or an eval before the first step
    if loop.last_phase == "eval":
        return False  # inside an eval: the frozen encoder of an eval is eval
    if loop.train_forward_in_step:
        # After the step's own forward and before its backward: a teacher, a frozen
        # discriminator. After the backward (a loop that updates its weights by hand has no
        # optimizer step to end the step): an eval.
        return not loop.backward_done
    if loop.frozen_prefix is None:
        return not _trained(module)
    # Between an optimizer step and the next training forward: only the modules, in order, that
    # the last step began with (an EMA copy evaluated there now and then is an eval).
    k = len(loop.frozen_seq)
    return k < len(loop.frozen_prefix) and loop.frozen_prefix[k] == id(module)


def _trained(module):
    """Whether a parameter of `module` requires grad and an optimizer the program made holds it
    (or no optimizer is known: a loop that updates its weights by hand). Asked only before the
    first step's training forward."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return False
    held = set()
    for ref in S.loop.optimizers.values():
        opt = ref()
        for group in getattr(opt, "param_groups", ()):
            held.update(id(p) for p in group["params"])
    return not held or any(id(p) in held for p in params)


def _trained_yet(loop):
    """Whether the program has trained yet (an optimizer made, a step taken, a backward run):
    before, its forwards are an inference program's, its clock the forward."""
    return loop.has_optimizer or loop.step or loop.backward_done


def fw_pre(module, args, kwargs=None):
    try:
        if _is_compiling():
            return None
        fwd = S.fwd
        if fwd.depth:
            if id(module) != fwd.outer_module or fwd.wrapping == id(module):
                fwd.depth += 1
                if S.inputs.pending:
                    take_input(args)
                return None
            # The outermost module again while "inside" it: its last forward ended without our
            # post hook (a KeyboardInterrupt, which torch's always_call does not cover). Start over.
        fwd.depth = 1
        fwd.outer_module = id(module)
        exc = _exc_info()[1]
        fwd.outer_exc = None if exc is None else id(exc)
        # A root with our hooks on it was chosen for having parameters.
        fwd.outer_emits = _graph_task_id() == -1 and (
            id(module) in fwd.root_hook_ids or _has_params(module))
        if not fwd.outer_emits:
            return None
        loop = S.loop
        phase = "train" if module.training and _grad_enabled() and not _inference_mode() \
            else "eval"
        frozen = fwd.outer_frozen = phase == "eval" and _frozen(module)
        phase = fwd.outer_phase = "train" if frozen else phase
        if phase == "train" and loop.step_pending and not frozen:
            loop.step_pending = False
            loop.step += 1
        elif phase == "train" and loop.backward_done and not loop.has_optimizer:
            # A loop that updates its weights by hand (no torch optimizer, e.g. pytorch's
            # word_language_model example): a training forward after a backward is a step.
            loop.step += 1
        if phase == "eval" or frozen:
            if not loop.train_forward_in_step:
                # What this step begins with before its training forward, frozen or not yet
                # known to be (a teacher run first is an eval in the first step alone).
                loop.frozen_seq.append(id(module))
        if frozen:
            return None  # one mark, after it returns
        if phase == "train":
            loop.backward_done = False
            if not loop.train_forward_in_step:
                loop.train_forward_in_step = True
                loop.frozen_prefix, loop.frozen_seq = loop.frozen_seq, []
                loop.train_loader = loop.last_loader  # its restarts are epochs (`epochs`)
        if phase == "train" or not _trained_yet(loop):
            # Before the mark: an iteration with a long input is marked (`budget`). A program
            # that has not trained (a serving or inference loop) sends each forward's own, after
            # it (`fw_post`): its memory may follow the size of what it is given.
            inputs = S.inputs
            inputs.pending = True
            take_input(args)
            if inputs.pending and kwargs:
                take_input(kwargs.values())
        emit("pre_forward", phase)
        if phase != "train":
            loop.evals += 1
            if not _trained_yet(loop):
                # A program that has not trained: its leak watch, before the forward (after
                # it, its output is still on its way to the program, held by the model's own
                # containers).
                at_inference_forward()
            else:
                at_eval_forward()
            if S.active and not S.paused:
                enabled = _grad_enabled() and not _inference_mode()
                if enabled not in loop.eval_notes:
                    loop.eval_notes.add(enabled)
                    S.probe.eval_autograd(enabled)
    except BaseException as e:
        interrupted(e)
    return None


def fw_post(module, args, output):
    try:
        if _is_compiling():
            return None
        fwd = S.fwd
        if fwd.depth > 1:
            fwd.depth -= 1
            return None
        if fwd.depth == 0:
            return None
        fwd.depth = 0
        fwd.outer_module = 0
        S.inputs.pending = False
        exc = _exc_info()[1]
        if not fwd.outer_emits or (exc is not None and id(exc) != fwd.outer_exc):
            return None  # the forward raised (not merely ran inside an except block)
        if fwd.outer_frozen:
            emit("frozen_forward", "train")
        else:
            emit("post_forward", fwd.outer_phase)
            loop = S.loop
            if fwd.outer_phase != "train" and not _trained_yet(loop):
                flush_input()  # an inference forward's input, sent after its mark
            # Backward is watched for its marks, and (no torch optimizer) to count the steps.
            if fwd.outer_phase == "train" and (loop.marking or not loop.has_optimizer):
                watch_backward(output)
        _saw_root(module)
    except BaseException as e:
        interrupted(e)
    return None


def _saw_root(module):
    fwd = S.fwd
    if id(module) in fwd.root_hook_ids or any(r() is module for r in fwd.roots):
        fwd.since_new_root += 1
    else:
        fwd.roots = [r for r in fwd.roots if r() is not None]
        fwd.roots.append(weakref.ref(module))
        fwd.since_new_root = 0
    if fwd.mode == "search" and fwd.since_new_root >= ROOTS_AFTER and not fwd.frozen_hooks:
        roots_only()


def search():
    """Global forward hooks: every module call is seen (and pays for it)."""
    fwd = S.fwd
    if fwd.frozen_hooks:
        return
    for h in fwd.root_handles + fwd.global_handles:
        h.remove()
    fwd.root_handles = []
    fwd.root_hook_ids = {}
    from torch.nn.modules.module import (register_module_forward_hook,
                                         register_module_forward_pre_hook)

    fwd.global_handles = [register_module_forward_pre_hook(fw_pre),
                          register_module_forward_hook(fw_post, always_call=True)]
    fwd.mode = "search"
    fwd.since_new_root = 0


def roots_only():
    """Hooks on the roots alone: every other module call returns to torch's fast path."""
    fwd = S.fwd
    if fwd.frozen_hooks:
        return
    handles = []
    ids = {}
    for ref in fwd.roots:
        root = ref()
        if root is None:
            continue
        # With the keyword arguments: a model called with `input_ids=` shows its input here.
        pre = root.register_forward_pre_hook(fw_pre, prepend=True, with_kwargs=True)
        post = root.register_forward_hook(fw_post, prepend=True, always_call=True)
        handles += [pre, post]
        ids[id(root)] = {pre.id, post.id}
    for h in fwd.global_handles:
        h.remove()
    fwd.global_handles = []
    fwd.root_handles = handles
    fwd.root_hook_ids = ids
    fwd.mode = "roots"


def remove_all():
    """Takes every forward hook of ours off (`pause`)."""
    fwd = S.fwd
    for h in fwd.global_handles + fwd.root_handles:
        h.remove()
    fwd.global_handles, fwd.root_handles, fwd.root_hook_ids = [], [], {}
