"""What the hooks change on `nn.Module` and around it, each for one reason:
- `train()` / `eval()`: another model may start running; the root search starts again;
- `__getstate__`: our hooks on a root never travel with it (`torch.save(model)`,
  `copy.deepcopy(model)` for an EMA copy, pickling);
- `torch.jit.script` / `trace`: TorchScript compiles a module's own hooks (ours hold try/except,
  which it cannot), so the global hooks (which it does not see) come back first;
- `torch.compile` / `module.compile()`: a compiled graph guards on the hooks in place (the number
  of global forward hooks, a module's own), and a change compiles it again: from the program's
  first compile on, the hooks stay as they are (`S.fwd.frozen_hooks`). Just before, a compiled
  model that is no other module's part becomes a root, and the hooks move to the roots if they
  were still global: global hooks would stay for the whole run, taking every module call off
  torch's fast path and making torch warn at every call of the compiled model (~30 us a step of
  a small compiled model). The wrapper `torch.compile` returns runs eagerly; what it wraps is
  traced, where our hooks do nothing. `module.compile()` compiles `_call_impl`, hooks included,
  so ours run eagerly around the compiled call instead. A compiled part of a model (a block)
  leaves the hooks global: the model around it is the root;
- the registry: every module made from now on, kept weakly, so that the breakdown finds the
  models without a pass over every object the garbage collector tracks (~40-80 ms with torch
  loaded): a module a submodule is assigned to, and that submodule (torch's global registration
  hook), and one rebuilt by `copy.deepcopy` or unpickling (`__setstate__`: an EMA copy,
  `torch.load` of a whole model).
"""

import weakref

from oomscope._hooks.errors import interrupted, ours, replace
from oomscope._hooks.forward import fw_post, fw_pre, roots_only, search
from oomscope._hooks.memory import known_modules
from oomscope._hooks.state import S

_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called",
               "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs")


def patch_train():
    def make(original):
        def train(self, mode=True):
            fwd = S.fwd
            fwd.in_train_call += 1
            try:
                result = original(self, mode)
            finally:
                fwd.in_train_call -= 1
            try:
                # Only the outermost call (train() recurses into every child), and only for a
                # module that is not a root already (HF Trainer calls model.train() every step).
                if (fwd.in_train_call == 0 and fwd.mode == "roots" and fwd.depth == 0
                        and not any(r() is self for r in fwd.roots)):
                    search()
            except BaseException as e:
                interrupted(e)
            return result
        return train

    replace(S.torch.nn.Module, "train", make)


def patch_getstate():
    def make(original):
        def __getstate__(self):
            state = original(self)
            try:
                ours = S.fwd.root_hook_ids.get(id(self))
                if ours:
                    state = dict(state)
                    for key in _HOOK_DICTS:
                        hooks = state.get(key)
                        if hooks and any(k in ours for k in hooks):
                            state[key] = type(hooks)((k, v) for k, v in hooks.items() if k not in ours)
            except BaseException as e:
                interrupted(e)
            return state
        return __getstate__

    replace(S.torch.nn.Module, "__getstate__", make)


def patch_jit():
    jit = S.torch.jit

    def make(original):
        def entry(*args, **kwargs):
            try:
                if S.fwd.mode == "roots":
                    search()
            except BaseException as e:
                interrupted(e)
            return original(*args, **kwargs)
        return entry

    for name in ("script", "trace", "trace_module"):
        if hasattr(jit, name):
            replace(jit, name, make)


def patch_compile():
    torch = S.torch

    def make_method(original):
        def compile(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            try:
                inner = self._compiled_call_impl
                if inner is not None:
                    self._compiled_call_impl = _eager_hooks_around(self, inner)
                _freeze(self, self)
            except BaseException as e:
                interrupted(e)
            return result
        return compile

    def make_function(original):
        def compile(*args, **kwargs):
            result = original(*args, **kwargs)
            try:
                model = args[0] if args else kwargs.get("model")
                _freeze(result, model)
            except BaseException as e:
                interrupted(e)
            return result
        return compile

    replace(torch.nn.Module, "compile", make_method)
    replace(torch, "compile", make_function)


def _freeze(compiled, model):
    """The program compiles `model` (`compiled`: the module that runs it, the wrapper
    `torch.compile` returned or the model itself): the hooks stay as they are from now on, and
    Dynamo never compiles them as frames of their own. First, a compiled module that is no other
    module's part becomes a root, and the hooks move to the roots if they were global."""
    fwd = S.fwd
    if fwd.frozen_hooks:
        return
    _run_eagerly()
    Module = S.torch.nn.Module
    if isinstance(compiled, Module) and not any(r() is compiled for r in fwd.roots) and \
            (fwd.mode == "roots" or (isinstance(model, Module) and _is_whole(model, compiled))):
        fwd.roots.append(weakref.ref(compiled))
        roots_only()
    fwd.frozen_hooks = True


def _is_whole(model, compiled):
    """Whether `model` is no other module's part (but the wrapper `compiled` that runs it), among
    the modules made since the hooks were installed (the registry); False when that is not
    known."""
    if not S.memory.registry:
        return False
    for ref in list(S.memory.modules.values()):
        parent = ref()
        if parent is not None and parent is not model and parent is not compiled and \
                any(child is model for child in parent._modules.values()):
            return False
    return True


def _run_eagerly():
    """Every frame of ours as plain Python under Dynamo. `module.compile()` compiles
    `_call_impl`, which Dynamo skips (torch's own file) while compiling every frame it calls that
    is not torch's, our global forward hooks among them: frames the program never compiled
    without us. So each function of the package, and everything it calls, runs uncompiled (where
    Dynamo traces a hook inline, inside the program's graph, it still does: the hook does nothing
    there, `torch.compiler.is_compiling()`)."""
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except BaseException:
        return  # an older torch: its compiled frames are what they were
    skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    for code in _our_code():
        set_code_exec_strategy(code, skip)


def _our_code():
    """The code objects of every function of the `oomscope` package (nested ones included)."""
    import sys
    import types

    seen = set()
    todo = []
    for name, module in list(sys.modules.items()):
        if name != "oomscope" and not name.startswith("oomscope."):
            continue
        for value in list(vars(module).values()):
            for item in [value] + (list(vars(value).values()) if isinstance(value, type) else []):
                item = getattr(item, "__func__", item)
                code = getattr(item, "__code__", None)
                if isinstance(code, types.CodeType) and ours(code.co_filename):
                    todo.append(code)
    while todo:
        code = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return seen


def _eager_hooks_around(module, inner):
    """`module.compile()`'s compiled call, with our forward hooks run eagerly around it (the
    module's own hooks inside it see a call within this one)."""
    def call(*args, **kwargs):
        fw_pre(module, args, kwargs)
        fwd = S.fwd
        outer, fwd.wrapping = fwd.wrapping, id(module)
        try:
            out = inner(*args, **kwargs)
        except BaseException:
            fwd.wrapping = outer
            fw_post(module, args, None)
            raise
        fwd.wrapping = outer
        fw_post(module, args, out)
        return out
    return call


def patch_registry():
    from torch.nn.modules.module import register_module_module_registration_hook

    register_module_module_registration_hook(_registered)

    def make(original):
        def __setstate__(self, state):
            original(self, state)
            _registered(self, None, None)
        return __setstate__

    replace(S.torch.nn.Module, "__setstate__", make)
    S.memory.registry = True


def _registered(module, name, submodule):
    try:
        memory = S.memory
        modules = memory.modules
        modules[id(module)] = weakref.ref(module)
        if submodule is not None:
            modules[id(submodule)] = weakref.ref(submodule)
        if len(modules) >= memory.modules_prune_at:
            # A program that makes modules all the time (a layer built inside the loop) must not
            # grow the registry: the dead are dropped, amortised O(1) a module.
            known_modules()
            memory.modules_prune_at = max(2 * len(modules), 1024)
    except BaseException as e:
        interrupted(e)
    return None
