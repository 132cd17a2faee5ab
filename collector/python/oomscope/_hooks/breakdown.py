"""What the model's memory is, zero-code: parameters, buffers, gradients and optimizer state, and
the models that hold parameters but are not trained (an EMA copy, a frozen encoder or teacher),
named as the program names them. `memory` calls `measure` at the end of iterations 1, 4, 16, 64,
... (where gradients and optimizer state both exist) and sends what changed as a `components`
record, the record the Rust `Session` writes, so the analysis, the summary and the report read
both the same way. Pure: it sends nothing and keeps no state.

How each part is found, and why that way:
- the optimizers: every `torch.optim.Optimizer` the program created (the hooks keep them weakly);
  their parameters are the trained ones, their `state` tensors the optimizer state.
- the models: every `nn.Module` alive in the process that is no other module's child — among
  the modules the hooks saw made (a registry: each submodule assigned, its parent, each copy or
  unpickled module, the roots) and those the program names (below), or, when those miss a
  trained parameter or there are no hooks, among every object (`gc.get_objects()`: ~40-80 ms
  with torch loaded). One with a parameter in an optimizer is the trained model; the others
  holding parameters or buffers (an EMA copy, a frozen VAE) are extras.
- names: a variable or attribute that holds the model, found from the stack's frames outermost
  first: the frames' globals (the script's own names), one level into the objects they hold
  (`trainer.model`, `self.ema`; what the program's own functions keep between calls, a mutable
  default or a closure's cell, as `remember._seen`), and on Python 3.13+ the functions' locals
  too. Before 3.13,
  reading a function frame's `f_locals` leaves a snapshot of its variables on the frame that keeps
  them alive (a tensor the loop has since dropped would not be freed), so locals are not read;
  a model only a function's locals name is named by class, and one with the trained model's
  class and parameter shapes is called its copy (`Denoiser_copy`).
- bytes: each tensor's storage, counted once however many tensors view it (tied weights, a
  flattened FSDP buffer, an optimizer state that aliases a parameter), on every device.
"""

import collections
import gc
import itertools
import sys
import types

from oomscope._hooks.errors import ours

# Items looked at in one dict, list or object the frames hold: bounded, whatever the program keeps.
_MAX_ITEMS = 256


class _Storages:
    """Counts bytes once per storage."""

    def __init__(self):
        self.seen = set()

    def add(self, tensor):
        try:
            storage = tensor.untyped_storage()
            nbytes = storage.nbytes()
            key = (storage.device.type, storage.device.index, storage.data_ptr(), nbytes)
        except Exception:  # sparse, nested or wrapper tensors: their own size, once per tensor
            try:
                nbytes = tensor.element_size() * tensor.nelement()
            except Exception:
                return 0
            key = ("id", id(tensor))
        if key in self.seen or nbytes == 0:
            return 0
        self.seen.add(key)
        return nbytes


def named(torch, frame, wanted, objects=None):
    """{id(obj): name} for the objects `wanted(obj)` accepts that the program names: the stack's
    frames outermost first (see the module docs for which namespaces are read), one level into
    what each variable holds. Also what the leak census (`held`) names holders by; `objects`, a
    dict, receives {id(obj): obj} of the same objects."""
    Module = torch.nn.Module
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    names = {}

    def take(name, obj):
        if name and name != "self" and id(obj) not in names and wanted(obj):
            names[id(obj)] = name.lstrip("_") or name
            if objects is not None:
                objects[id(obj)] = obj

    def inside(name, value, home):
        """One level into what a variable of the namespace `home` holds."""
        kind = type(value)  # never `isinstance`: see `_models`
        if issubclass(kind, (types.ModuleType, type)):
            return
        if issubclass(kind, types.FunctionType):
            # The program's own function (made where it is named): what it keeps between calls,
            # its mutable defaults (`def remember(x, _seen={})`) and what its closure holds.
            if getattr(value, "__globals__", None) is not home:
                return
            items = {"%s.%s" % (name, k): v for k, v in _function_state(value).items()}
        elif issubclass(kind, Module):
            items = dict(value.__dict__.get("_modules") or {})
            items.update((k, v) for k, v in value.__dict__.items() if not k.startswith("_"))
        elif issubclass(kind, dict):
            items = value
        elif issubclass(kind, (list, tuple)):
            items = {"%s[%d]" % (name, i): v for i, v in enumerate(value[:_MAX_ITEMS])}
        else:
            items = getattr(value, "__dict__", None)
            if not isinstance(items, dict):
                return
        # The first `_MAX_ITEMS` only, never a copy of the whole: a program's cache of 100 000
        # entries cost 180 ms a look when its items were listed first. (A dict another thread
        # changes meanwhile raises, and is skipped.)
        for attr, inner in list(itertools.islice(items.items(), _MAX_ITEMS)):
            if isinstance(attr, str) and not attr.startswith("__"):
                take(attr, inner)
                # A queue (queue.Queue, its kin) keeps its items in a deque of its own: named as
                # the program names the queue (`ckpt.queue`), read from its attributes only.
                kept = getattr(inner, "__dict__", None)
                kept = kept.get("queue") if type(kept) is dict else None
                if type(kept) is collections.deque:
                    take("%s.%s" % (name, attr), kept)

    read_locals = sys.version_info >= (3, 13)
    namespaces = []
    for f in reversed(frames):
        if ours(f.f_code.co_filename):
            continue
        if not namespaces or namespaces[-1] is not f.f_globals:
            namespaces.append(f.f_globals)
        if read_locals and f.f_locals is not f.f_globals:
            namespaces.append(f.f_locals)
    for namespace in namespaces:
        try:
            variables = list(namespace.items())
        except Exception:
            continue
        for name, value in variables:
            if isinstance(name, str) and not name.startswith("__"):
                take(name, value)
        for name, value in variables[:_MAX_ITEMS * 4]:
            if isinstance(name, str) and not name.startswith("__"):
                try:
                    inside(name, value, namespace)
                except Exception:  # an object whose attributes cannot be listed: skip it
                    pass
    return names


def _function_state(fn):
    """{name: value} of what a function keeps between calls: its defaults, by their parameters'
    names, and its closure's cells, by the names it uses for them."""
    code = fn.__code__
    items = {}
    defaults = fn.__defaults__ or ()
    if defaults:
        items.update(zip(code.co_varnames[:code.co_argcount][-len(defaults):], defaults))
    items.update(fn.__kwdefaults__ or {})
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            items[name] = cell.cell_contents
        except ValueError:  # a cell not filled yet
            pass
    return items


def subclasses(cls):
    """`cls` and every class derived from it now: a set, so that picking a kind's instances out
    of `gc.get_objects()` is one set lookup per object (`type(o) in kinds`, ~10x faster than
    `issubclass`; and never `isinstance`, which asks an object its `__class__`, which some
    answer with a warning on the program's stderr: torch.distributed.reduce_op)."""
    kinds = {cls}
    todo = [cls]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if sub not in kinds:
                kinds.add(sub)
                todo.append(sub)
    return kinds


def instances(kinds):
    """Every object the garbage collector tracks whose class is in `kinds`, picked out in C
    (`compress` over `map`): ~35% faster than a comprehension over the ~250 000 objects of a
    process with torch loaded, where the pass is most of a breakdown's cost."""
    objects = gc.get_objects()
    return list(itertools.compress(objects, map(kinds.__contains__, map(type, objects))))


def _models(torch, modules=None):
    """The outermost modules alive: no other module's child. Among `modules` when given (the
    hooks' registry), else among every object."""
    if modules is None:
        modules = instances(subclasses(torch.nn.Module))
    children = set()
    for m in modules:
        for child in m.__dict__.get("_modules", {}).values():
            children.add(id(child))
    return [m for m in modules if id(m) not in children]


def _shape(module, params):
    return type(module), tuple(tuple(p.shape) for p in params)


def _state_bytes(torch, opt, storages):
    """The bytes of an optimizer's state tensors not yet counted in `storages`."""
    own = 0
    for per_param in opt.state.values():
        values = per_param.values() if isinstance(per_param, dict) else (per_param,)
        for v in values:
            if isinstance(v, torch.Tensor):
                own += storages.add(v)
    return own


def measure(torch, optimizers, frame, modules=None):
    """The breakdown now: a dict of `parameters_bytes`, `buffers_bytes`, `gradients_bytes`,
    `optimizer_state_bytes`, `extras` ([(name, bytes)], the untrained models) and `optimizers`
    ([(label, bytes)]: each optimizer's state, labelled `variable:Class`, or `Class(model)` by the
    model it trains where the program's names do not reach it). The models are looked for among
    `modules` when given, and among every object when one of them misses a trained parameter."""
    trained = set()
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                trained.add(id(p))
    Module = torch.nn.Module
    opt_ids = {id(o) for o in optimizers}
    named_modules = []  # the modules the program names: with `modules`, a lone layer it keeps

    def wanted(o):
        if issubclass(type(o), Module):
            named_modules.append(o)
            return True
        return id(o) in opt_ids

    names = named(torch, frame, wanted)
    if modules is not None:
        modules = list({id(m): m for m in modules + named_modules}.values())
    models = _models(torch, modules)
    if modules is not None:
        found = {id(p) for m in models for p in m.parameters()}
        if not trained <= found:
            models = _models(torch)
    storages = _Storages()
    parameters = buffers = gradients = state = 0
    trained_shapes = set()  # (class, parameter shapes) of the trained models: a copy matches
    untrained = []
    params_seen = []
    model_of = {}  # id(first parameter of a trained model) -> its name, else its class
    for module in models:
        params = list(module.parameters())
        if any(id(p) in trained for p in params):
            label = names.get(id(module)) or type(module).__name__
            model_of.update((id(p), label) for p in params)
            parameters += sum(storages.add(p) for p in params)
            buffers += sum(storages.add(b) for b in module.buffers())
            params_seen += params
            trained_shapes.add(_shape(module, params))
        else:
            untrained.append((module, params))
    extras = {}
    for module, params in untrained:
        size = sum(storages.add(p) for p in params) + \
            sum(storages.add(b) for b in module.buffers())
        if not size:
            continue
        label = names.get(id(module))
        if label is None:
            label = type(module).__name__
            if _shape(module, params) in trained_shapes:
                label += "_copy"
        extras[label] = extras.get(label, 0) + size
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                parameters += storages.add(p)
                params_seen.append(p)
    elements = {}  # id(parameter) -> (elements, trained)
    for p in params_seen:
        try:
            elements[id(p)] = (p.numel(), id(p) in trained and p.requires_grad)
        except Exception:  # an UninitializedParameter (a Lazy module not run yet): no count
            elements[id(p)] = (None, False)
        if p.grad is not None:
            gradients += storages.add(p.grad)
    counts = [n for n, _ in elements.values()]
    per_optimizer = {}
    labels = {}  # id(optimizer) -> its label, for `within_iteration`
    for opt in optimizers:
        own = _state_bytes(torch, opt, storages)
        state += own
        label = type(opt).__name__
        if id(opt) in names:
            label = "%s:%s" % (names[id(opt)], label)
        else:  # by the model it trains: GANs' two Adams are `Adam(Discriminator)`, `Adam(Generator)`
            first = next((p for g in opt.param_groups for p in g["params"]), None)
            if first is not None and id(first) in model_of:
                label = "%s(%s)" % (label, model_of[id(first)])
        n, base = 1, label
        while label in per_optimizer:  # two alike stay two: `Adam(Sequential)#2`
            n += 1
            label = "%s#%d" % (base, n)
        per_optimizer[label] = own
        labels[id(opt)] = label
    return {
        "parameters_bytes": parameters,
        "buffers_bytes": buffers,
        "gradients_bytes": gradients,
        "optimizer_state_bytes": state,
        "extras": sorted(extras.items()),
        "optimizers": sorted(per_optimizer.items()),
        "parameter_count": None if None in counts else sum(counts),
        "trainable_parameter_count":
            None if None in counts else sum(n for n, t in elements.values() if t),
        "optimizer_labels": labels,
    }


def within_iteration(torch, optimizers):
    """What changes from stage to stage of an iteration, cheaply (no search for models): the
    gradients of the parameters the optimizers train and each optimizer's state, each storage
    once, as (gradients_bytes, [(id(optimizer), state bytes)])."""
    storages = _Storages()
    gradients = 0
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    gradients += storages.add(p.grad)
    per_optimizer = [(id(opt), _state_bytes(torch, opt, storages)) for opt in optimizers]
    return gradients, sorted(per_optimizer)
