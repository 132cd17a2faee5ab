"""What keeps a leak's new tensors together, for the leak census (`held`) when the program names
none of their holders: followed up from each sampled tensor through containers and the
attributes of objects (`Referrers`, one scan a level), the nearest list, dict, set or deque that
holds the samples of the most groups, named by the object whose attribute it is.

Why: the census groups new tensors by shape, and one group's tensors may all sit in one item of
what grows: a chat server's sessions dict holds every conversation, each conversation holds its
own (key, value) tuples, and a conversation's tensors all have one shape. The tuple, replaced at
every turn, is the first container a tensor has, and "a tuple (2 items) gains a tensor a forward"
says the wrong thing; the dict that holds every group's samples retains the new memory. A
container reached by one sample only is no evidence of retaining many, and is not taken.

Bounds: `LEVELS` levels up, at most `MAX_NODES` objects a level; frames, modules, classes and
functions are not followed (a module's globals are what `breakdown.named` reads). Nothing of the
program is changed; what the walk holds is dropped when the census's search ends."""

import types
from collections import deque

CONTAINERS = (list, dict, tuple, set, deque)
_MUTABLE = (list, dict, set, deque)  # what a program keeps adding to
LEVELS = 5  # levels followed up from a sampled tensor
MAX_NODES = 512  # objects looked at a level
_NOT_FOLLOWED = (types.FrameType, types.ModuleType, type, types.FunctionType, types.MethodType,
                 types.CodeType, types.BuiltinFunctionType, types.CellType)


def attribute_of(owner, value):
    """The name of `owner`'s attribute that is `value`, or None."""
    try:
        attrs = vars(owner)
    except TypeError:
        return None
    return next((k for k, v in attrs.items() if v is value), None)


def attribute_owner(o, ignore, refs):
    """(owner, name) of an object that holds `o` as an attribute: in its attribute dict, or (an
    object whose attributes Python keeps inline, 3.11 on) by the object itself; or None."""
    for referrer in refs.of(o):
        if id(referrer) in ignore:
            continue
        if type(referrer) is dict:
            owners = [x for x in refs.of(referrer) if getattr(x, "__dict__", None) is referrer]
        else:
            owners = [referrer]
        for owner in owners:
            name = attribute_of(owner, o)
            if name is not None:
                return owner, name
    return None


def _follows(r, node):
    """Whether the walk goes on from `node` to its referrer `r`: a container, or an object that
    holds `node` as an attribute or as its attribute dict."""
    if type(r) in CONTAINERS:
        return True
    if isinstance(r, _NOT_FOLLOWED):
        return False
    return getattr(r, "__dict__", None) is node or attribute_of(r, node) is not None


def common(groups, refs):
    """For each group (a list of its sampled tensors), the mutable container that holds, through
    containers and attributes, the samples of the most groups (then the most samples, then the
    nearest), reached by two samples at least; None where there is none. Our own lists are told
    to `refs` as it goes (they refer to what they hold)."""
    nodes, origins = [], []  # the level's objects, and the (group, sample) each came from
    refs.ignore.update((id(nodes), id(origins), id(groups), *map(id, groups)))
    for g, samples in enumerate(groups):
        for s, t in enumerate(samples):
            nodes.append(t)
            origins.append((g, s))
    found = {}  # id(container) -> container
    reached = {}  # id(container) -> ({group}, {(group, sample)}, depth)
    refs.ignore.update((id(found), id(reached)))
    seen = set()
    for depth in range(1, LEVELS + 1):
        refs.fetch(nodes)
        up, up_origins = [], []
        refs.ignore.update((id(up), id(up_origins)))
        for node, origin in zip(nodes, origins):
            for r in refs.of(node):
                if id(r) in refs.ignore or (id(r), origin) in seen or len(up) >= MAX_NODES:
                    continue
                if not _follows(r, node):
                    continue
                seen.add((id(r), origin))
                up.append(r)
                up_origins.append(origin)
                if type(r) in _MUTABLE:
                    found[id(r)] = r
                    gs, ss, d = reached.get(id(r), (set(), set(), depth))
                    gs.add(origin[0])
                    ss.add(origin)
                    reached[id(r)] = (gs, ss, d)
        nodes[:], origins[:] = up, up_origins
        up = up_origins = None
        if not nodes:
            break
    nodes[:] = []
    # A dict that is an object's attributes is the object's story, not a container it keeps.
    attribute_dicts = {k for k, o in found.items() if type(o) is dict and any(
        getattr(x, "__dict__", None) is o for x in refs.known.get(k, ()))}
    chosen = []
    for g in range(len(groups)):
        best = max(((len(gs), len(ss), -d, k) for k, (gs, ss, d) in reached.items()
                    if g in gs and len(ss) >= 2 and k not in attribute_dicts), default=None)
        chosen.append(found[best[3]] if best else None)
    found.clear()
    reached.clear()
    return chosen
