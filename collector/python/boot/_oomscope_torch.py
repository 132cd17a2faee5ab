"""oomscope's zero-code PyTorch hooks: stage marks, steps, phases and the OOM moment from an
unmodified training script. The bootstrap (sitecustomize.py) loads this module right after the
program imports torch; nothing here runs before that, and nothing here raises into the program.

Where each mark comes from, and why that source:
- `pre_forward` / `post_forward`: the outermost forward of a module with parameters. Global
  forward pre/post hooks with a depth counter find it. Loss modules (no parameters), forwards
  re-run inside backward (activation checkpointing: `_current_graph_task_id() != -1`) and code
  being traced by `torch.compile` (`torch.compiler.is_compiling()`: a hook inside a compiled
  region would break the graph) do not count. Global hooks take every module call off torch's
  fast path (~4 us a call), so once the roots are known (eight outermost forwards with no new
  root) they are swapped for hooks on the roots alone; `module.train()/eval()` re-arms the
  search, since that is when another model (an EMA copy, a teacher) tends to start running.
- `pre_backward` / `post_backward`: a pre-hook on the autograd node of the forward's outputs
  fires when backward reaches them, and queues an end-of-backward callback on the autograd
  engine. Global
  module backward hooks are never used: they slow backward ~5x and break in-place ops.
- `pre_optimizer_step` / `post_optimizer_step`: torch's global optimizer step hooks. The step
  number counts iterations: an iteration ends when every optimizer the program created has
  stepped since the last one ended, so a GAN's discriminator and generator steps, an
  actor-critic pair or a WGAN's five critic steps and one generator step count once, however
  forwards interleave with them (an optimizer that keeps not stepping while another steps
  `_IDLE_AFTER` times is set aside until it steps). Micro-batches under gradient accumulation
  are several forwards and backwards in one step; a step GradScaler skips (inf/NaN gradients)
  fires no optimizer hook and is sent as a note. A program with no torch optimizer at all
  (weights updated by hand) counts a step at every training forward that follows a backward.
  The next step begins at the next training forward (or optimizer step, when the step runs its
  forward in a closure): an eval after the last step is not a step.
- `pre_checkpoint_save` / `post_checkpoint_save`: around `torch.save`, so a checkpoint's spike is
  named for what it is.
- the phase: `eval` when the module is not training, grad is off or inference mode is on —
  except a `frozen_forward`: a module none of whose parameters requires grad (a diffusion
  loop's VAE or text encoder, a distillation teacher) run inside a training step — after the
  step's training forward, in the first step, or between an optimizer step and the next
  training forward when it is the module the last step began with at that place (an EMA copy
  evaluated there is not). One mark, after it returns, in the training phase: part of the step
  it serves, never an eval of its own; a step still begins at its training forward, so a
  frozen forward that opens a step carries the number of the step before. (An eval that begins with that same frozen module reads
  its first forward as the step's, and the step after an eval its first as the eval's.)

On CUDA (only once the program initialised it: this module never does) every mark carries the
caching allocator's statistics, and the allocator's OOM observer reports an OOM the moment it
happens, before the exception unwinds. A failed host allocation that ends the program
(libtorch's `DefaultCPUAllocator`, `MemoryError`) is reported from `sys.excepthook`.

Who sends: DataLoader workers never do (their marks would repeat the trainer's); forked
children start over with their own step count. Marks carry the pid and RANK (the helper adds
them); a process with RANK/LOCAL_RANK/WORLD_SIZE says so once in a note.
"""

import os
import sys
import time
import weakref

_ROOTS_AFTER = 8  # outermost forwards with no new root before the global hooks go
# Notes the analysis reads (`oomscope_format::EVAL_AUTOGRAD_*_NOTE`; a test holds them equal):
# whether eval forwards keep autograd graphs decides if "use torch.no_grad()" is advice or noise.
EVAL_AUTOGRAD_ON_NOTE = "eval forwards run with autograd on"
EVAL_AUTOGRAD_OFF_NOTE = "eval forwards run without autograd"
# The stages around torch.save (`oomscope_format::CHECKPOINT_SAVE_STAGES`).
PRE_SAVE, POST_SAVE = "pre_checkpoint_save", "post_checkpoint_save"
_IDLE_AFTER = 8  # steps of one optimizer, another never stepping, before that one is set aside
# After a breakdown, the next one waits until this many times its own cost has passed: the
# breakdown's share of the run stays under 0.1% however short the steps (a 5 ms loop paid 0.2 ms
# a step over 2 000 steps on the 4^k schedule alone: each costs ~75 ms on a 2-core VM).
_BREAKDOWN_COST_FACTOR = 1000

_probe = None
_probe_module = None  # the helper's module (its file's frames are ours too)
_breakdown = None  # `_oomscope_breakdown`: what the model's memory is
_held = None  # `_oomscope_held`: what holds a leak
_torch = None
_S = None  # the state, one per process


class _State:
    def __init__(self):
        self.active = None  # None: not decided yet (first mark decides)
        self.depth = 0
        self.outer_emits = False
        self.outer_phase = "train"
        self.outer_frozen = False
        self.step = 0
        self.step_pending = False
        self.in_opt_step = 0
        self.opt_outer = 0  # id() of the optimizer of the outermost step in progress
        self.has_optimizer = False  # a torch.optim.Optimizer was created
        # Every one created: id() -> a weak reference (never kept alive by us). Not a WeakSet:
        # iterating one at each iteration's end cost ~5 us in a training loop.
        self.optimizers = {}
        self.idle = set()  # id()s of created ones set aside (see _iteration_done)
        self.stepped = set()  # id()s of the optimizers stepped since the iteration began
        self.repeats = {}  # id() -> its steps since the iteration began
        self.last_phase = None  # of the last mark sent
        self.eval_notes = set()  # the EVAL_AUTOGRAD_* notes sent
        self.train_forward_in_step = False  # a training forward since the last optimizer step
        self.frozen_seq = []  # id()s of the frozen forwards since then, before a training one
        self.frozen_prefix = None  # the ones the last step began with (None: no step yet)
        self.backward_done = False  # a backward ended since the last training forward
        self.opt_steps_applied = 0
        self.roots = []  # weak references to the modules seen as outermost forwards with
        # parameters (weak: a model the program drops must be freed as it would be without us)
        self.since_new_root = 0
        self.mode = "search"  # or "roots"
        self.global_handles = []
        self.root_handles = []
        self.root_hook_ids = {}  # id(root module) -> ids of our hooks on it
        self.outer_module = 0  # id() of the module of the current outermost forward
        self.outer_exc = None  # id() of the exception being handled when it started
        self.in_train_call = 0
        self.bw_task = None
        self.stage = None
        self.user_stages = set()
        self.emitted = {}  # stage -> step we last marked it at (until the program marks it)
        self.user_steps = False
        self.user_phases = False
        self.cuda_ready = False
        self.snapshot = False
        # Where the first OOM's whole memory snapshot goes: this prefix, the pid, `.pickle`.
        self.snapshot_prefix = None
        self.paused = False
        self.iterations = 0  # iterations ended (every optimizer stepped)
        self.breakdown_at = 1  # the iteration that measures the breakdown next (then ×4)
        self.breakdown_not_before = 0.0  # ...and not before this time (`_BREAKDOWN_COST_FACTOR`)
        self.breakdown_sent = None  # the last breakdown sent
        self.user_components = False  # the program sends its own (the helper's components())
        self.watch = None  # `_oomscope_held.Watch`: when to count live tensors
        self.evals = 0  # eval forwards seen (a pair of counts with one between them is dropped)
        self.input_pending = False  # a training forward's input not found yet (see _take_input)
        self.input_shape = None  # the last input shape sent
        self.input_max = None  # (elements, shape) of this step's largest input so far
        self.input_step = None  # the step input_max belongs to
        self.oom_breakdown = False  # a breakdown was sent at an OOM
        self.stage_breakdown_at = None  # the iteration whose every stage sends what changed
        self.stage_sent = None  # (gradients, per-optimizer state) last sent in it
        # The modules made since torch was imported: id() -> a weak reference (not a WeakSet:
        # a module class with `__eq__` and no `__hash__` cannot be in a set). Where the breakdown
        # looks for models instead of a pass over every object (`_patch_module_registry`).
        self.modules = {}
        self.modules_prune_at = 1024  # entries at which the dead ones are dropped (then 2x left)
        self.registry = False  # whether `_patch_module_registry` is in place


def install(torch, here):
    """Called once, right after `import torch` finished."""
    global _probe, _probe_module, _torch, _S
    _torch = torch
    _S = _State()
    _S.snapshot = os.environ.get("OOMSCOPE_OOM_SNAPSHOT") == "1"
    _S.snapshot_prefix = os.environ.get("OOMSCOPE_OOM_SNAPSHOT_PREFIX") or None
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_oomscope_probe", os.path.join(here, "oomscope", "__init__.py"))
    probe_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe_module)
    _probe = probe_module.Probe()
    _probe_module = probe_module
    if not _probe.enabled:
        return
    try:
        _load_memory_modules(importlib.util, here)
    except BaseException as e:  # the marks go on without the breakdown and the leak census
        _interrupted(e)
    import warnings

    # Our global hooks make torch warn on every `torch.compile(module)` call; the warning is
    # about us, not the program, and must not appear on its stderr.
    warnings.filterwarnings(
        "ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
    if not hasattr(torch, "compiler") or not hasattr(torch.compiler, "is_compiling"):
        return  # older than the torch these hooks know (2.1+): record from outside only
    os.register_at_fork(after_in_child=_after_fork)
    _search()
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    register_optimizer_step_pre_hook(_guard(_opt_pre))
    register_optimizer_step_post_hook(_guard(_opt_post))
    # Each patch on its own: one that this torch does not support leaves the others in place.
    for patch in (_patch_train, _patch_optimizer_init, _patch_getstate, _patch_jit,
                  _patch_compile, _patch_grad_scaler, _patch_cuda_init, _patch_excepthook,
                  _patch_save, _patch_module_registry):
        try:
            patch()
        except BaseException as e:
            _interrupted(e)


def _load_memory_modules(util, here):
    """`_oomscope_breakdown` and `_oomscope_held`, and the garbage collector's callback: what
    the memory is. On their own, so that a failure here leaves the marks in place."""
    global _breakdown, _held
    spec = util.spec_from_file_location(
        "_oomscope_breakdown", os.path.join(here, "_oomscope_breakdown.py"))
    breakdown = util.module_from_spec(spec)
    spec.loader.exec_module(breakdown)
    spec = util.spec_from_file_location("_oomscope_held", os.path.join(here, "_oomscope_held.py"))
    held = util.module_from_spec(spec)
    spec.loader.exec_module(held)
    import gc

    gc.callbacks.append(held.GcWatch(_torch, _gc_freed))
    _breakdown, _held = breakdown, held
    _S.watch = held.Watch()


def _interrupted(exc):
    """What a hook does with what it caught. An error of ours is dropped: the program never sees
    it. A Ctrl-C is the program's: backward's end callback is the first Python code after a long
    stretch of C++, so a pending SIGINT surfaces there, in our frame. With Python's own handler it
    is raised again the moment our hook returns (`_thread.interrupt_main`), so the traceback ends
    in torch or the program, as it does without us; any other signal-made exception (the
    program's own handler raised it) goes on up unchanged."""
    if isinstance(exc, Exception):
        return
    import signal

    if isinstance(exc, KeyboardInterrupt) and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        import _thread

        _thread.interrupt_main()
        return
    raise exc


def _guard(fn):
    """A hook that can never raise into torch or the program."""
    def hook(*args):
        try:
            return fn(*args)
        except BaseException as e:
            _interrupted(e)
            return None
    hook.__name__ = fn.__name__
    return hook


# --- measuring our own cost (scripts/measure_zero_code.py) ------------------------------------

def pause():
    """Takes every hook off the program's path (forward hooks removed; the optimizer and
    backward hooks return at once), so that the same process can be timed with and without."""
    S = _S
    for h in S.global_handles + S.root_handles:
        h.remove()
    S.global_handles, S.root_handles, S.root_hook_ids = [], [], {}
    S.paused = True


def resume():
    """Undoes `pause()`: back to hooks on the roots, or to the search when none is known yet."""
    S = _S
    S.paused = False
    if S.mode == "roots" and S.roots:
        _roots_only()
    else:
        _search()


# --- the program's own marks (the helper) win over ours ---------------------------------------

def user_mark(stage):
    """The program marks `stage` itself (through the helper): from now on we do not. Returns
    True when we already marked it in this step, so that the helper does not send it twice."""
    if _S is None:
        return False
    _S.user_stages.add(stage)
    return _S.emitted.pop(stage, None) == _S.step


def user_step():
    if _S is not None:
        _S.user_steps = True


def user_phase():
    if _S is not None:
        _S.user_phases = True


def user_components():
    if _S is not None:
        _S.user_components = True


# --- sending ---------------------------------------------------------------------------------

def _emit(stage, phase):
    S = _S
    if S.paused:
        return
    if S.active is None:
        S.active = _decide_active()
    if not S.active:
        return
    S.stage = stage
    S.last_phase = phase
    if stage in S.user_stages:
        return
    S.emitted[stage] = S.step
    if not S.cuda_ready and not S.iterations:
        # CUDA initialised before our patch of `_lazy_init` saw it: looked for in the first
        # iteration, then once an iteration (`_opt_post`), not at every mark (~1 us each).
        _cuda_ready_check()
    _probe._hook_mark(stage, None if S.user_steps else S.step,
                      None if S.user_phases else phase, S.cuda_ready)
    if S.stage_breakdown_at is not None:
        _stage_breakdown()


def _decide_active():
    try:
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            return False
    except BaseException as e:
        _interrupted(e)
    ids = [(key, os.environ.get(env)) for key, env in
           (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE"))]
    ids = [(k, v) for k, v in ids if v is not None]
    if ids:
        _probe.note("zero-code hooks in pid %d: %s" % (
            os.getpid(), " ".join("%s=%s" % kv for kv in ids)))
    return True


def _after_fork():
    """A forked child (a DataLoader worker, a fork-started rank) starts over."""
    global _S
    try:
        old = _S
        _S = _State()
        _S.snapshot = old.snapshot
        _S.user_stages = old.user_stages
        _S.user_steps, _S.user_phases = old.user_steps, old.user_phases
        _S.user_components = old.user_components
        _S.watch = _held.Watch() if _held is not None else None
        _S.mode, _S.roots = old.mode, old.roots
        _S.global_handles, _S.root_handles = old.global_handles, old.root_handles
        _S.root_hook_ids = old.root_hook_ids
        _S.has_optimizer, _S.paused = old.has_optimizer, old.paused
        _S.optimizers, _S.idle = old.optimizers, old.idle
        _S.modules, _S.registry = old.modules, old.registry
        _probe._reopen()
    except BaseException as e:
        _interrupted(e)


# --- forward -----------------------------------------------------------------------------------

def _phase_of(module):
    t = _torch
    if module.training and t.is_grad_enabled() and not t.is_inference_mode_enabled():
        return "train"
    return "eval"


def _has_params(module):
    for _ in module.parameters():
        return True
    return False


def _frozen(module):
    """A no-grad forward that serves the training step under way (see the module docs): called
    only for forwards that would otherwise be eval, so a trained model's eval pays for one
    parameter at most."""
    S = _S
    if not (S.has_optimizer or S.step or S.backward_done):
        return False  # no training yet: an inference program, or an eval before the first step
    if S.last_phase == "eval":
        return False  # inside an eval: the frozen encoder of an eval is eval
    for p in module.parameters():
        if p.requires_grad:
            return False
    if S.train_forward_in_step or S.frozen_prefix is None:
        # After the step's own forward (a teacher, a frozen discriminator), or in the first step.
        return True
    # Between an optimizer step and the next training forward: only the modules, in order, that
    # the last step began with (an EMA copy evaluated there is an eval, not part of a step).
    k = len(S.frozen_seq)
    return k < len(S.frozen_prefix) and S.frozen_prefix[k] == id(module)


def _take_input(args):
    """The training step's input: the first tensor among `args` (or one level into a list, tuple
    or dict among them); the step keeps its largest (micro-batches), sent at its end by
    `_flush_input`. Called for the outermost training forward's positional arguments, then its
    keyword arguments (`input_ids=`; the hook on a root has them), then, while none is found and
    the global hooks are on (they see positional arguments only), for each module it calls: the
    embedding gets the token ids."""
    S = _S
    Tensor = _torch.Tensor
    if type(args) is tuple and args and type(args[0]) is Tensor:
        a = args[0]  # the common case, a batch first: nothing to look through
    else:
        a = _first_tensor(args, Tensor)
        if a is None:
            return
    S.input_pending = False
    if S.input_step != S.step:
        _flush_input()  # a step that ended without an optimizer (weights updated by hand)
        S.input_step = S.step
    n = a.numel()
    if S.input_max is None or n > S.input_max[0]:
        S.input_max = (n, tuple(a.shape))


def _first_tensor(args, Tensor):
    """The first tensor among `args`, or one level into a list, tuple or dict among them."""
    for a in args:
        kind = type(a)
        if issubclass(kind, dict):
            a = next((v for v in a.values() if issubclass(type(v), Tensor)), None)
        elif issubclass(kind, (list, tuple)):
            a = next((v for v in a if issubclass(type(v), Tensor)), None)
        if a is not None and issubclass(type(a), Tensor):
            return a
    return None


def _flush_input():
    """Sends the ended step's largest input when it differs from the last one sent: a loop of
    fixed-size batches sends one record, a step among them with a longer batch two."""
    S = _S
    m, S.input_max = S.input_max, None
    if m is None or m[1] == S.input_shape or not S.active or S.paused:
        return
    S.input_shape = m[1]
    _probe._input(m[0], "x".join(map(str, m[1])) or "scalar",
                  step=None if S.user_steps else S.input_step)


def _fw_pre(module, args, kwargs=None):
    try:
        if _torch.compiler.is_compiling():
            return None
        S = _S
        if S.depth:
            if id(module) != S.outer_module:
                S.depth += 1
                if S.input_pending:
                    _take_input(args)
                return None
            # The outermost module again while "inside" it: its last forward ended without our
            # post hook (a KeyboardInterrupt, which torch's always_call does not cover). Start over.
        S.depth = 1
        S.outer_module = id(module)
        exc = sys.exc_info()[1]
        S.outer_exc = None if exc is None else id(exc)
        # A root with our hooks on it was chosen for having parameters: walking them again
        # (`module.parameters()` builds a generator over every submodule) cost ~4 us a forward.
        S.outer_emits = _torch._C._current_graph_task_id() == -1 and (
            id(module) in S.root_hook_ids or _has_params(module))
        if S.outer_emits:
            phase = _phase_of(module)
            S.outer_frozen = phase == "eval" and _frozen(module)
            S.outer_phase = "train" if S.outer_frozen else phase
            if S.outer_phase == "train" and S.step_pending and not S.outer_frozen:
                S.step_pending = False
                S.step += 1
            elif S.outer_phase == "train" and S.backward_done and not S.has_optimizer:
                # A loop that updates its weights by hand (no torch optimizer, e.g. pytorch's
                # word_language_model example): a training forward after a backward is a step.
                S.step += 1
            if S.outer_frozen:
                if not S.train_forward_in_step:
                    S.frozen_seq.append(id(module))
                return None  # one mark, after it returns
            if S.outer_phase == "train":
                S.backward_done = False
                if not S.train_forward_in_step:
                    S.train_forward_in_step = True
                    S.frozen_prefix, S.frozen_seq = S.frozen_seq, []
            _emit("pre_forward", S.outer_phase)
            if S.outer_phase == "train":
                S.input_pending = True
                _take_input(args)
                if S.input_pending and kwargs:
                    _take_input(kwargs.values())
            if S.outer_phase == "eval":
                S.evals += 1
            if S.outer_phase == "eval" and S.active and not S.paused:
                t = _torch
                note = EVAL_AUTOGRAD_ON_NOTE if t.is_grad_enabled() and \
                    not t.is_inference_mode_enabled() else EVAL_AUTOGRAD_OFF_NOTE
                if note not in S.eval_notes:
                    S.eval_notes.add(note)
                    _probe.note(note)
    except BaseException as e:
        _interrupted(e)
    return None


def _fw_post(module, args, output):
    try:
        if _torch.compiler.is_compiling():
            return None
        S = _S
        if S.depth > 1:
            S.depth -= 1
            return None
        if S.depth == 0:
            return None
        S.depth = 0
        S.outer_module = 0
        S.input_pending = False
        exc = sys.exc_info()[1]
        if not S.outer_emits or (exc is not None and id(exc) != S.outer_exc):
            return None  # the forward raised (not merely ran inside an except block)
        if S.outer_frozen:
            _emit("frozen_forward", "train")
            _saw_root(module)
            return None
        _emit("post_forward", S.outer_phase)
        if S.outer_phase == "train":
            _watch_backward(output)
        _saw_root(module)
    except BaseException as e:
        _interrupted(e)
    return None


def _saw_root(module):
    S = _S
    if id(module) in S.root_hook_ids or any(r() is module for r in S.roots):
        S.since_new_root += 1
    else:
        S.roots = [r for r in S.roots if r() is not None]
        S.roots.append(weakref.ref(module))
        S.since_new_root = 0
    if S.mode == "search" and S.since_new_root >= _ROOTS_AFTER:
        _roots_only()


def _search():
    """Global forward hooks: every module call is seen (and pays for it)."""
    S = _S
    for h in S.root_handles + S.global_handles:
        h.remove()
    S.root_handles = []
    S.root_hook_ids = {}
    from torch.nn.modules.module import (register_module_forward_hook,
                                         register_module_forward_pre_hook)

    S.global_handles = [register_module_forward_pre_hook(_fw_pre),
                        register_module_forward_hook(_fw_post, always_call=True)]
    S.mode = "search"
    S.since_new_root = 0


def _roots_only():
    """Hooks on the roots alone: every other module call returns to torch's fast path."""
    S = _S
    handles = []
    ids = {}
    for ref in S.roots:
        root = ref()
        if root is None:
            continue
        # With the keyword arguments: a model called with `input_ids=` shows its input here.
        pre = root.register_forward_pre_hook(_fw_pre, prepend=True, with_kwargs=True)
        post = root.register_forward_hook(_fw_post, prepend=True, always_call=True)
        handles += [pre, post]
        ids[id(root)] = {pre.id, post.id}
    for h in S.global_handles:
        h.remove()
    S.global_handles = []
    S.root_handles = handles
    S.root_hook_ids = ids
    S.mode = "roots"


def _replace(owner, name, make):
    """Replaces `owner.name` (a method or module function) with `make(original)`, keeping the
    original's name and docstring, and `__wrapped__` for whoever inspects it."""
    original = getattr(owner, name)
    wrapper = make(original)
    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", name)
    wrapper.__doc__ = original.__doc__
    setattr(owner, name, wrapper)


def _patch_train():
    """`model.train()` / `model.eval()`: another model may start running; search again."""
    def make(original):
        def train(self, mode=True):
            S = _S
            S.in_train_call += 1
            try:
                result = original(self, mode)
            finally:
                S.in_train_call -= 1
            try:
                # Only the outermost call (train() recurses into every child), and only for a
                # module that is not a root already (HF Trainer calls model.train() every step).
                if (S.in_train_call == 0 and S.mode == "roots" and S.depth == 0
                        and not any(r() is self for r in S.roots)):
                    _search()
            except BaseException as e:
                _interrupted(e)
            return result
        return train

    _replace(_torch.nn.Module, "train", make)


_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called",
               "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs")


def _patch_getstate():
    """Our hooks on a root must never travel with it: `torch.save(model)`, `copy.deepcopy(model)`
    (an EMA copy) and pickling take the module's state without them."""
    def make(original):
        def __getstate__(self):
            state = original(self)
            try:
                ours = _S.root_hook_ids.get(id(self)) if _S is not None else None
                if ours:
                    state = dict(state)
                    for key in _HOOK_DICTS:
                        hooks = state.get(key)
                        if hooks and any(k in ours for k in hooks):
                            state[key] = type(hooks)((k, v) for k, v in hooks.items() if k not in ours)
            except BaseException as e:
                _interrupted(e)
            return state
        return __getstate__

    _replace(_torch.nn.Module, "__getstate__", make)


def _patch_jit():
    """TorchScript compiles a module's own hooks (ours hold try/except, which it cannot): go back
    to the global hooks (which it does not see) before scripting or tracing."""
    jit = _torch.jit

    def make(original):
        def entry(*args, **kwargs):
            try:
                if _S.mode == "roots":
                    _search()
            except BaseException as e:
                _interrupted(e)
            return original(*args, **kwargs)
        return entry

    for name in ("script", "trace", "trace_module"):
        if hasattr(jit, name):
            _replace(jit, name, make)


def _patch_optimizer_init():
    """Knowing that the program has a torch optimizer tells how to count steps: by its steps, or
    (a loop that updates weights by hand) by training forwards that follow a backward."""
    def make(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if _S is not None:
                _S.has_optimizer = True
                try:
                    S = _S
                    for key in [k for k, ref in S.optimizers.items() if ref() is None]:
                        del S.optimizers[key]
                    S.optimizers[id(self)] = weakref.ref(self)
                    S.idle.discard(id(self))  # (the id of one that was set aside and is gone)
                except BaseException as e:
                    _interrupted(e)
        return __init__

    _replace(_torch.optim.Optimizer, "__init__", make)


def _patch_module_registry():
    """Keeps (weakly) every module made from now on, so that the breakdown finds the models
    without a pass over every object the garbage collector tracks (~40-80 ms with torch loaded,
    most of a breakdown's cost): a module a submodule is assigned to, and that submodule
    (torch's global registration hook, called by `__setattr__` and `add_module`), and one
    rebuilt by `copy.deepcopy` or unpickling (`__setstate__`: an EMA copy, `torch.load` of a
    whole model). The breakdown adds the modules the program names (a lone layer kept in a
    variable), and looks through every object when a trained parameter is still not found."""
    from torch.nn.modules.module import register_module_module_registration_hook

    register_module_module_registration_hook(_module_registered)

    def make(original):
        def __setstate__(self, state):
            original(self, state)
            _module_registered(self, None, None)
        return __setstate__

    _replace(_torch.nn.Module, "__setstate__", make)
    _S.registry = True


def _module_registered(module, name, submodule):
    try:
        S = _S
        if S is not None:
            modules = S.modules
            modules[id(module)] = weakref.ref(module)
            if submodule is not None:
                modules[id(submodule)] = weakref.ref(submodule)
            if len(modules) >= S.modules_prune_at:
                # A program that makes modules all the time (a layer built inside the loop)
                # must not grow the registry: the dead are dropped, amortised O(1) a module.
                _known_modules()
                S.modules_prune_at = max(2 * len(modules), 1024)
    except BaseException as e:
        _interrupted(e)
    return None


def _known_modules():
    """The live modules `_patch_module_registry` saw (and the roots), dead entries dropped;
    None without the registry (an older torch): the breakdown then looks through every object."""
    S = _S
    if not S.registry:
        return None
    for ref in S.roots:
        root = ref()
        if root is not None:
            S.modules[id(root)] = ref
    live = []
    for key, ref in list(S.modules.items()):
        module = ref()
        if module is None:
            del S.modules[key]
        else:
            live.append(module)
    return live


def _patch_save():
    """`torch.save`: a checkpoint (a state dict's copies, the pickler's buffers, a CPU copy of
    device tensors) is a spike of its own, between `pre_checkpoint_save` and
    `post_checkpoint_save`, in the phase and step it happens in, so that the analysis names it
    instead of blaming the step."""
    def make(original):
        def save(*args, **kwargs):
            _save_mark(PRE_SAVE)
            try:
                return original(*args, **kwargs)
            finally:
                _save_mark(POST_SAVE)
        return save

    _replace(_torch, "save", make)


def _save_mark(stage):
    try:
        S = _S
        if S is not None and not S.depth and _torch._C._current_graph_task_id() == -1:
            _emit(stage, S.last_phase or "train")
    except BaseException as e:
        _interrupted(e)


def _patch_compile():
    """`model.compile()` compiles `_call_impl`, hooks included, so they would be traced (no marks
    at all under the compile guard): run our forward hooks eagerly around the compiled call."""
    def make(original):
        def compile(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            try:
                inner = self._compiled_call_impl
                if inner is not None:
                    self._compiled_call_impl = _eager_hooks_around(self, inner)
            except BaseException as e:
                _interrupted(e)
            return result
        return compile

    _replace(_torch.nn.Module, "compile", make)


def _eager_hooks_around(module, inner):
    def call(*args, **kwargs):
        _fw_pre(module, args, kwargs)
        try:
            out = inner(*args, **kwargs)
        except BaseException:
            _fw_post(module, args, None)
            raise
        _fw_post(module, args, out)
        return out
    return call


# --- backward ----------------------------------------------------------------------------------

def _grad_tensors(output, depth=0):
    Tensor = _torch.Tensor
    if isinstance(output, Tensor):
        return [output] if output.requires_grad else []
    if depth >= 2:
        return []
    if isinstance(output, dict):
        items = output.values()
    elif isinstance(output, (list, tuple)):
        items = output
    else:
        return []
    found = []
    for item in items:
        found.extend(_grad_tensors(item, depth + 1))
        if len(found) >= 16:
            break
    return found


def _watch_backward(output):
    """A pre-hook on the autograd node of each output (leaves are skipped): the first to
    run is backward reaching the forward's outputs. Cheaper than `register_multi_grad_hook` (one
    C call per output instead of a Python object graph), and `_bw_start` keeps one per backward."""
    for tensor in _grad_tensors(output):
        node = tensor.grad_fn
        if node is not None:  # a leaf (a Parameter returned as is) would keep the hook forever
            node.register_prehook(_bw_start)


def _bw_start(grad):
    try:
        S = _S
        task = _torch._C._current_graph_task_id()
        if task == S.bw_task:
            return None  # two outputs (or two forwards) in one backward: one pre_backward
        S.bw_task = task
        _emit("pre_backward", "train")
        _torch.autograd.Variable._execution_engine.queue_callback(_bw_end)
    except BaseException as e:
        _interrupted(e)
    return None


def _bw_end():
    try:
        _S.backward_done = True
        _emit("post_backward", "train")
    except BaseException as e:
        _interrupted(e)


# --- optimizer ---------------------------------------------------------------------------------

def _opt_pre(optimizer, args, kwargs):
    S = _S
    if S.paused:
        return None
    if S.in_opt_step and id(optimizer) == S.opt_outer:
        S.in_opt_step = 0  # its last step raised (a caught OOM): the post hook never ran
    S.in_opt_step += 1
    S.stepped.add(id(optimizer))  # every level: a wrapper and the optimizer it steps
    S.idle.discard(id(optimizer))
    if S.in_opt_step == 1:
        S.opt_outer = id(optimizer)
        if S.step_pending:
            # The iteration's first event is its optimizer step: `optimizer.step(closure)` runs
            # the forward and backward inside it (Lightning, LBFGS), so the step begins here.
            S.step_pending = False
            S.step += 1
        _emit("pre_optimizer_step", "train")
    return None


def _opt_post(optimizer, args, kwargs):
    S = _S
    if S.paused:
        return
    S.in_opt_step = max(S.in_opt_step - 1, 0)
    if S.in_opt_step:
        return
    S.opt_steps_applied += 1
    if not S.cuda_ready:
        _cuda_ready_check()
    _emit("post_optimizer_step", "train")
    S.train_forward_in_step = False
    S.frozen_seq = []
    # The next step begins with the next training forward, once this step of this optimizer ends
    # the iteration.
    if _iteration_done(optimizer):
        S.step_pending = True
        S.iterations += 1
        _flush_input()
        if S.iterations >= S.breakdown_at and time.monotonic() >= S.breakdown_not_before:
            S.breakdown_at = S.iterations * 4
            start = time.monotonic()
            _send_breakdown()
            if S.iterations == 1 and S.breakdown_sent is not None:
                # The next iteration, stage by stage: what its gradients and optimizer state are.
                S.stage_breakdown_at = S.iterations
                S.stage_sent = None
            S.breakdown_not_before = start + (time.monotonic() - start) * (1 + _BREAKDOWN_COST_FACTOR)
        _watch_held()


def _gc_freed(generation, collected, freed_bytes, pause_us):
    """A collection freed memory (`_oomscope_held.GcWatch`)."""
    S = _S
    if S is None or S.paused or not S.active:
        return
    _probe._gc(generation, collected, freed_bytes, pause_us)


def _watch_held():
    """At an iteration's end: one memory reading; while it keeps rising, two counts of the live
    tensors some iterations apart, and what grew between them (`_oomscope_held`)."""
    S = _S
    if not S.active or S.paused or S.watch is None:
        return
    try:
        if S.watch.evals_seen != S.evals:
            # Memory settles for a few steps after an eval (the C allocator takes in what it
            # freed): rises counted from the last eval on, and a count never made then (its own
            # allocations, at the top of the heap, would keep glibc from trimming what the eval
            # freed).
            S.watch.evals_seen = S.evals
            S.watch.readings = []
        now = time.monotonic()
        if S.watch.first is None and now < S.watch.next_reading_s:
            return  # (a rise is seen as well over several iterations as over one)
        S.watch.next_reading_s = now + _held.READING_GAP_S
        due = S.watch.due(S.iterations, _held.memory_now(_torch, S.cuda_ready))
        if due is None:
            return
        # The caller's frame, never this one: a local holding its own frame is a reference
        # cycle that would keep the census's list of every tensor (and so tensors the program
        # has dropped) alive until the garbage collector runs.
        frame = sys._getframe(1)
        count = _held.census(_torch, frame, _breakdown)
        if due == "first":
            # Not the tensors themselves; the evals so far, to tell one between the counts.
            S.watch.first = (S.iterations, S.step, count[:2], S.evals)
            del count
            return
        iteration, step, first, evals = S.watch.first
        if evals != S.evals:
            # An eval ran between the counts: what grew is what it kept (the analysis's
            # eval-retains-memory), not what each step keeps. Start over.
            S.watch.first = None
            S.watch.readings = []
            return
        S.watch.done(S.iterations)
        rows = _held.grown(_torch, frame, _breakdown, first, count,
                           S.iterations - iteration)
        del first, count
        for (device, dtype, shape, grad_fn), n, nbytes, holder in rows:
            _probe._held(n, nbytes, step, S.step, device, dtype, shape, grad_fn, holder)
    except BaseException as e:
        _interrupted(e)
    finally:
        frame = count = None


def _send_breakdown(force=False):
    """The model's memory by component, at the end of iterations 1, 4, 16, 64, ... (gradients and
    optimizer state exist then; each no sooner than `_BREAKDOWN_COST_FACTOR` times the last one's
    cost after it), sent when it changed, and at the first OOM whatever it is
    (`force`: an OOM in the first step would otherwise have none) (`_oomscope_breakdown`)."""
    S = _S
    if not S.active or S.paused or S.user_components or _breakdown is None:
        return
    try:
        b = _breakdown.measure(_torch, _live_optimizers(), sys._getframe(1),
                               _known_modules())
    except BaseException as e:
        _interrupted(e)
        return
    if b == S.breakdown_sent and not force:
        return
    S.breakdown_sent = b
    _probe._components(parameters_bytes=b["parameters_bytes"], buffers_bytes=b["buffers_bytes"],
                      gradients_bytes=b["gradients_bytes"],
                      optimizer_state_bytes=b["optimizer_state_bytes"],
                      step=None if S.user_steps else S.step, extras=b["extras"],
                      optimizers=b["optimizers"], parameter_count=b["parameter_count"],
                      trainable_parameter_count=b["trainable_parameter_count"])


def _stage_breakdown():
    """At each mark of the iteration after the first breakdown: the breakdown with that moment's
    gradients and optimizer state, sent at its first mark and then when they change (zero_grad
    frees the gradients, backward makes them); the analysis reads it stage by stage."""
    S = _S
    b = S.breakdown_sent
    if S.iterations != S.stage_breakdown_at or b is None or S.user_components or S.paused:
        S.stage_breakdown_at = None
        return
    try:
        gradients, per_optimizer = _breakdown.within_iteration(_torch, _live_optimizers())
    except BaseException as e:
        S.stage_breakdown_at = None
        _interrupted(e)
        return
    now = (gradients, per_optimizer)
    if now == S.stage_sent:
        return
    S.stage_sent = now
    labels = b.get("optimizer_labels") or {}
    _probe._components(parameters_bytes=b["parameters_bytes"], buffers_bytes=b["buffers_bytes"],
                       gradients_bytes=gradients,
                       optimizer_state_bytes=sum(n for _, n in per_optimizer),
                       step=None if S.user_steps else S.step, extras=b["extras"],
                       optimizers=sorted((labels.get(key, "optimizer"), n)
                                         for key, n in per_optimizer),
                       parameter_count=b["parameter_count"],
                       trainable_parameter_count=b["trainable_parameter_count"])


def _live_optimizers():
    return [o for o in (ref() for ref in list(_S.optimizers.values())) if o is not None]


def _iteration_done(optimizer):
    """Whether every optimizer the program created has stepped since the iteration began; a
    created one that has not while this one stepped more than `_IDLE_AFTER` times (a leftover,
    or one for a later phase) is set aside until it steps."""
    S = _S
    key = id(optimizer)
    S.repeats[key] = S.repeats.get(key, 0) + 1
    stepped, idle = S.stepped, S.idle
    waiting = [k for k, ref in S.optimizers.items()
               if k not in stepped and k not in idle and ref() is not None]
    if waiting and S.repeats[key] > _IDLE_AFTER:
        idle.update(waiting)
        waiting = []
    if waiting:
        return False
    S.stepped.clear()
    S.repeats.clear()
    return True


def _patch_grad_scaler():
    try:
        from torch.amp.grad_scaler import GradScaler
    except BaseException:
        return

    def make(original):
        def step(self, optimizer, *args, **kwargs):
            before = _S.opt_steps_applied
            result = original(self, optimizer, *args, **kwargs)
            try:
                if _S.opt_steps_applied == before and self.is_enabled() and _S.active:
                    _probe.note("GradScaler skipped the optimizer step at step %d (inf/NaN "
                                "gradients)" % _S.step)
            except BaseException as e:
                _interrupted(e)
            return result
        return step

    _replace(GradScaler, "step", make)


# --- CUDA: allocator statistics, the OOM observer, snapshots ------------------------------------

def _patch_cuda_init():
    """The moment the program initialises CUDA (never before, never by us), attach the OOM
    observer (attaching initialises CUDA, which would break a program that forks first)."""
    def make(original):
        def _lazy_init():
            original()
            if not _S.cuda_ready:
                _cuda_ready_check()
        return _lazy_init

    _replace(_torch.cuda, "_lazy_init", make)


def _cuda_ready_check():
    S = _S
    try:
        if not _torch.cuda.is_initialized():
            return
    except BaseException:
        return
    S.cuda_ready = True
    try:
        if S.snapshot:
            _torch.cuda.memory._record_memory_history(
                enabled="state", context="state", stacks="python")
    except BaseException:
        S.snapshot = False
    try:
        _torch._C._cuda_attach_out_of_memory_observer(_observer)
    except BaseException as e:
        _interrupted(e)


def _observer(device, alloc, total, free):
    """Called by the caching allocator after a failed allocation, lock released, before the
    OutOfMemoryError is raised. Also called for OOMs the program catches (cuDNN falls back to a
    smaller workspace; batch finders): how the process ended tells fatal from caught."""
    try:
        S = _S
        if S.active is False:
            return
        stats = _torch._C._cuda_memoryStats(device)
        allocated = stats["allocated_bytes"]["all"]["current"]
        reserved = stats["reserved_bytes"]["all"]["current"]
        # PyTorch's own wording, with exact byte counts, as the text to show; the numbers travel
        # as fields of the record (allocated_bytes, reserved_bytes).
        text = ("CUDA out of memory (allocator observer). Tried to allocate %d bytes. GPU %d has a "
                "total capacity of %d bytes of which %d bytes is free. Of the allocated memory %d "
                "bytes is allocated by PyTorch, and %d bytes is reserved by PyTorch but "
                "unallocated." % (alloc, device, total, free, allocated,
                                  max(reserved - allocated, 0)))
        if not S.oom_breakdown:
            # What the memory was at the first OOM, sent just before it (the analysis reads the
            # breakdown at or before an OOM).
            S.oom_breakdown = True
            _send_breakdown(force=True)
        _probe._oom(text, source="allocator", stage=S.stage,
                    step=None if S.user_steps else S.step, requested_bytes=alloc,
                    device=device, free_bytes=free, total_bytes=total,
                    allocated_bytes=allocated, reserved_bytes=reserved)
        if S.snapshot:
            snapshot = _torch.cuda.memory._snapshot()
            _probe.alive(alive_by_line(snapshot))
            _save_snapshot(snapshot)
    except BaseException as e:
        _interrupted(e)


# The note that names the saved snapshot (`shared::model::OOM_SNAPSHOT_NOTE`: the report reads it).
OOM_SNAPSHOT_NOTE = "memory snapshot at the OOM: "


def _save_snapshot(snapshot):
    """Pickles the first OOM's whole snapshot next to the trace, as `_dump_snapshot` would, and
    notes its file name in the trace (the report bakes the two together). Written to a temporary
    name first, so a half-written file never looks like a snapshot."""
    S = _S
    prefix, S.snapshot_prefix = S.snapshot_prefix, None
    if not prefix:
        return
    import pickle

    path = "%s%d.pickle" % (prefix, os.getpid())
    partial = path + ".partial"
    with open(partial, "wb") as f:
        pickle.dump(snapshot, f)
    os.replace(partial, path)
    _probe.note(OOM_SNAPSHOT_NOTE + os.path.basename(path))


def _user_frame(frames, skip):
    for frame in frames:
        name = frame.get("filename") or ""
        if not name or name.startswith("<") or any(part in name for part in skip):
            continue
        return frame
    return None


def alive_by_line(snapshot, top=20):
    """Reduces a `torch.cuda.memory._snapshot()` to the live blocks grouped by the first frame in
    the program's own code: [(filename, line, function, bytes, count)], largest first, at most
    `top` rows, then one row `("<other>", 0, "", bytes, count)` for the rest and
    `("<unknown>", 0, "", ...)` for blocks recorded before history was on."""
    import sysconfig

    skip = ["/torch/", "/site-packages/", "/dist-packages/", "_oomscope_"]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            skip.append(path + os.sep)
    groups = {}
    for segment in snapshot.get("segments", ()):
        for block in segment.get("blocks", ()):
            if block.get("state") != "active_allocated":
                continue
            frame = _user_frame(block.get("frames") or (), skip)
            if frame is None:
                key = ("<unknown>", 0, "")
            else:
                key = (frame.get("filename", "?"), int(frame.get("line", 0)), frame.get("name", ""))
            size = int(block.get("requested_size") or block.get("size") or 0)
            bytes_count = groups.get(key, (0, 0))
            groups[key] = (bytes_count[0] + size, bytes_count[1] + 1)
    rows = sorted(((k[0], k[1], k[2], v[0], v[1]) for k, v in groups.items()),
                  key=lambda r: (-r[3], r[0], r[1]))
    if len(rows) > top:
        rest = rows[top:]
        rows = rows[:top] + [("<other>", 0, "", sum(r[3] for r in rest), sum(r[4] for r in rest))]
    return rows


# --- host allocation failures --------------------------------------------------------------------

def _host_error(value):
    """(requested bytes or None, first line) for a failed host allocation, else None."""
    text = str(value)
    first = text.strip().splitlines()[0] if text.strip() else type(value).__name__
    if "DefaultCPUAllocator" in text or "can't allocate memory" in text:
        requested = None
        marker = "you tried to allocate "
        at = text.find(marker)
        if at >= 0:
            digits = text[at + len(marker):].split(" ", 1)[0]
            if digits.isdigit():
                requested = int(digits)
        line = next((l for l in text.splitlines() if "allocate memory" in l), first)
        return requested, line.strip()
    if isinstance(value, MemoryError):
        return None, "MemoryError: " + first if first != "MemoryError" else first
    return None


def _without_our_frames(tb):
    """`tb` with the frames of our files taken out. A Ctrl-C pending while backward runs in C++
    surfaces at the first Python code after it: at the entry of our end-of-backward callback,
    before any `try` of ours can catch it. The exception then goes up through torch as the program's
    own; only its traceback would name us, so the printed traceback is the program's as without
    the collector. (Traceback links are writable since Python 3.7.)"""
    ours = {__file__, getattr(_probe_module, "__file__", None)}

    def skip(node):
        while node is not None and node.tb_frame.f_code.co_filename in ours:
            node = node.tb_next
        return node

    head = node = skip(tb)
    while node is not None:
        node.tb_next = skip(node.tb_next)
        node = node.tb_next
    return head


def _patch_excepthook():
    def make(previous):
        def excepthook(kind, value, traceback):
            try:
                traceback = _without_our_frames(traceback)
                seen = 0
                chained = value
                while chained is not None and seen < 16:  # the causes printed with it, too
                    chained.__traceback__ = _without_our_frames(chained.__traceback__)
                    chained = chained.__cause__ or chained.__context__
                    seen += 1
            except BaseException as e:
                _interrupted(e)
            try:
                found = _host_error(value)
                if found is not None and _S.active is not False:
                    requested, line = found
                    _probe._oom(line, source="host_error", stage=_S.stage,
                                step=None if _S.user_steps else _S.step, requested_bytes=requested)
            except BaseException as e:
                _interrupted(e)
            previous(kind, value, traceback)
        return excepthook

    _replace(sys, "excepthook", make)
