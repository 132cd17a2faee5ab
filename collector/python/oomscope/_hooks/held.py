"""What holds a leak, zero-code: when memory keeps rising at the end of iterations, the hooks
count the process's live tensors twice, some steps apart, and say which groups grew and what
holds them — what people find today by hand with `gc.get_objects()`.

- Suspicion (`Watch`): the memory in use at an iteration's end (`memory_now`: the CUDA
  allocator's allocated bytes once CUDA is up, else glibc's bytes in use, else the RSS; read at
  iteration ends at least `READING_GAP_S` apart) rose at each of the last `RISES` readings and
  by at least `MIN_RISE_BYTES` in all. Nothing else runs per step.
- A count (`census`): every tensor `gc.get_objects()` returns, grouped by device, dtype, shape
  and the autograd node that made it; each storage counted once. Plus, for the tensors the
  program names (a variable, an attribute, one level in) that carry an autograd graph, the size
  of that graph: a running total summed without `.item()` keeps every step's graph behind one
  tensor, which a count of tensors never sees.
- Containers (`containers`): the lists, dicts, sets and deques the program names (its module
  globals and the stack's variables, one level in), by length, at the same two counts. One that
  gained at least an item a step, of Python objects rather than tensors (a tokenizer's cache, a
  list of results), is sent as an `objects` row with its new items' size sampled
  (`_SAMPLE_ITEMS` of them, each one level in). Memory that grows as Python objects is named as
  tensors are.
- Holders: for a group that grew, a few of its new tensors' referrers (`gc.get_referrers`): a
  list or dict, named as the program names it (`breakdown.named`), else by type and the object
  whose attribute it is. What a row is travels as a field (`Row.kind`: `tensors` a Python object
  holds, one named tensor's autograd `graph`, tensors only a reference `cycle` holds, tensors no
  Python container holds, `uncontained`), never in the holder's words.
- Bounds: one pair of counts `APART` iterations apart, then none for `COOLDOWN` iterations
  (doubling after each pair); weak references only between the counts; nothing the program holds
  is touched, and a count's own lists are dropped before the hook returns.
"""

import gc
import os
import sys
from collections import deque, namedtuple
from itertools import islice

from oomscope._hooks.breakdown import instances, named, subclasses

RISES = 4  # consecutive rising iteration ends before a count
# An eval's batches: 8 rising before a count, so that a short eval (a validation of 10 batches)
# is never counted (its counts could not pair within it, and their passing allocations move the
# C allocator's heap under the eval's own growth, which the analysis reads from the RSS).
EVAL_RISES = 8
MIN_RISE_BYTES = 1 << 20  # over those rises
APART = 8  # iterations between the two counts
EVAL_APART = 4  # an eval's batches between its two counts
COOLDOWN = 64  # iterations after a pair before the next suspicion (doubles each time)
# Iteration ends read no more often than this (seconds): a loop of 4 ms steps paid ~10 us a
# step for a reading at each (the call's Python, out of the CPU's caches by then).
READING_GAP_S = 0.01
_MIN_GROUP_BYTES = 64 << 10  # a group's growth below this (and below one tensor a step) is noise
_MAX_GROUPS = 8  # groups sent per pair
_MAX_GRAPH_NODES = 200_000  # autograd nodes walked per named tensor
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except Exception:
        return None


_mallinfo2 = None  # glibc's mallinfo2(), once looked up (False: not available)


def _malloc_in_use():
    """Bytes the C allocator has handed out and not had back (glibc `mallinfo2`: arena chunks in
    use plus mmapped chunks), or None. Unlike the RSS it falls when memory is freed even if
    glibc keeps the pages (a heap it does not trim, an mmap threshold that has grown)."""
    global _mallinfo2
    if _mallinfo2 is None:
        _mallinfo2 = False
        try:
            import ctypes

            class Mallinfo2(ctypes.Structure):
                _fields_ = [(name, ctypes.c_size_t) for name in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                    "uordblks", "fordblks", "keepcost")]

            f = ctypes.CDLL(None).mallinfo2
            f.restype = Mallinfo2
            f.argtypes = []
            _mallinfo2 = f
        except Exception:
            pass
    if not _mallinfo2:
        return None
    m = _mallinfo2()
    return m.uordblks + m.hblkhd


def memory_now(torch, cuda=None):
    """The memory the program's tensors and objects use, as exactly as can be read: CUDA
    allocated once CUDA is up (`cuda`: whether it is, when the caller knows), else the C
    allocator's bytes in use, else the RSS (~15 us)."""
    try:
        if cuda or (cuda is None and torch.cuda.is_initialized()):
            return torch.cuda.memory_allocated()
    except Exception:
        pass
    in_use = _malloc_in_use()
    return in_use if in_use is not None else _rss_bytes()


class Watch:
    """Decides at each iteration's end whether to count now (see the module docs). `apart` ticks
    between a pair's counts and `gap_s` between readings: an eval's batches are few and slower
    than a fast loop's iterations, so its watch reads each, waits for `EVAL_RISES` rises and
    counts `EVAL_APART` apart."""

    def __init__(self, apart=APART, gap_s=READING_GAP_S, rises=RISES):
        self.apart = apart
        self.gap_s = gap_s
        self.rises = rises
        self.readings = []
        self.first = None  # (iteration, step, census) of a pair's first count
        self.quiet_until = 0
        self.cooldown = COOLDOWN
        self.evals_seen = 0  # the hooks' eval count when the readings began
        self.next_reading_s = 0.0  # (time.monotonic) no reading before it (`READING_GAP_S`)
        self.training = True  # on the iterations' clock (False: an inference program's forwards)

    def due(self, iteration, reading):
        """'first', 'second' or None."""
        if self.first is not None:
            return "second" if iteration >= self.first[0] + self.apart else None
        if iteration < self.quiet_until or reading is None:
            return None
        self.readings.append(reading)
        del self.readings[:-(self.rises + 1)]
        r = self.readings
        if len(r) == self.rises + 1 and all(b > a for a, b in zip(r, r[1:])) and \
                r[-1] - r[0] >= MIN_RISE_BYTES:
            return "first"
        return None

    def done(self, iteration):
        self.first = None
        self.readings = []
        self.quiet_until = iteration + self.cooldown
        self.cooldown *= 2


def _key(t):
    try:
        gf = t.grad_fn
    except Exception:
        gf = None
    shape = "x".join(str(int(d)) for d in t.shape) or "scalar"
    return (str(t.device), str(t.dtype).replace("torch.", ""), shape,
            type(gf).__name__ if gf is not None else "")


def _storage_key(t):
    try:
        s = t.untyped_storage()
        return (s.device.type, s.device.index, s.data_ptr()), s.nbytes()
    except Exception:
        return ("id", id(t)), 0


def _graph_nodes(root):
    """Autograd nodes reachable from `root` (bounded). Each `next_functions` access makes fresh
    wrappers, so the walk holds the ones it saw (a freed wrapper's id is reused)."""
    seen = {}
    stack = [root]
    while stack and len(seen) < _MAX_GRAPH_NODES:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        try:
            stack.extend(n for n, _ in node.next_functions)
        except Exception:
            pass
    return len(seen)


def census(torch, frame):
    """({key: [count, bytes, ids]} of the live tensors, {name: (nodes, key)} of the named tensors'
    autograd graphs, the tensors themselves). One pass over `gc.get_objects()`; the caller drops
    the tensors' list before returning to the program."""
    Tensor = torch.Tensor
    groups = {}
    storages = set()
    kinds = subclasses(Tensor)
    tensors = instances(kinds)
    for o in tensors:
        key = _key(o)
        skey, nbytes = _storage_key(o)
        if skey in storages:
            nbytes = 0
        storages.add(skey)
        g = groups.get(key)
        if g is None:
            g = groups[key] = [0, 0, set()]
        g[0] += 1
        g[1] += nbytes
        g[2].add(id(o))
    graphs = {}
    names = named(torch, frame, lambda o: type(o) in kinds and
                  getattr(o, "grad_fn", None) is not None)
    if names:
        for t in tensors:
            name = names.get(id(t))
            if name is not None:
                graphs[name] = (_graph_nodes(t.grad_fn), _key(t))
    return groups, graphs, tensors


# What a row is (the protocol's `held kind=`; `oomscope_format::HeldKind`, a test holds them
# equal).
TENSORS, GRAPH, CYCLE, UNCONTAINED, OBJECTS = "tensors", "graph", "cycle", "uncontained", "objects"
# One row of `grown`: `items` is the holder's length when it is a container, else None.
Row = namedtuple("Row", "kind count bytes device dtype shape grad_fn holder items")
_CONTAINERS = (list, dict, tuple, set)
_MAX_CYCLE = 16  # objects followed back through referrers to tell a garbage cycle


def _attribute_of(owner, value):
    """The name of `owner`'s attribute that is `value`, or None."""
    try:
        attrs = vars(owner)
    except TypeError:
        return None
    return next((k for k, v in attrs.items() if v is value), None)


def _only_a_cycle(obj, ignore):
    """True when every object that refers to `obj`, followed back up to `_MAX_CYCLE` objects,
    is one of those objects (or an attribute dict of one): nothing the program reaches holds it,
    only a reference cycle, which the garbage collector frees when it next runs. (A running
    function's local variables are not visible to `gc.get_referrers`; the census asks this only
    of tensors that grew one a step, which locals cannot hold.)"""
    seen = {id(obj): obj}
    queue = [obj]
    while queue:
        o = queue.pop()
        for r in gc.get_referrers(o):
            if id(r) in ignore or id(r) in seen or r is queue:
                continue
            if type(r) is dict and any(getattr(x, "__dict__", None) is r for x in seen.values()):
                continue
            if len(seen) >= _MAX_CYCLE or type(r).__name__ in ("frame", "module"):
                return False
            seen[id(r)] = r
            queue.append(r)
    return len(seen) > 1 or any(r is obj for r in gc.get_referrers(obj))


_ENCLOSING_LEVELS = 3  # containers followed up from a tensor's own
_MAX_ENCLOSING = 64  # containers looked at on the way


def _enclosing(owners, ignore):
    """{id: container} of the containers that hold the owners' containers, up to
    `_ENCLOSING_LEVELS` up, nearest first (bounded). Our own lists and dicts, which refer to
    the same objects, are never taken."""
    found = {}
    level = [o for o, attr in owners if attr is None]
    for _ in range(_ENCLOSING_LEVELS):
        up = []
        ours = {id(found), id(level), id(up), id(owners), *map(id, owners), *ignore}
        for o in level:
            for r in gc.get_referrers(o):
                if type(r) in _CONTAINERS and id(r) not in ours and id(r) not in found:
                    found[id(r)] = r
                    up.append(r)
                    if len(found) >= _MAX_ENCLOSING:
                        return found
        level = up
    return found


def _holder(torch, frame, tensors, census_list):
    """(kind, words, items, named) for what holds these tensors: the first container or object
    among their referrers, named as the program names it (`items`: a container's length;
    `named`: a name of the program's, a global or a local, says it); `CYCLE` when only a
    reference cycle holds it, `UNCONTAINED` when no Python container does. `census_list` is the
    census's own list (a referrer of every tensor, not the program's)."""
    ignore = {id(tensors), id(census_list)}
    owners = []
    for t in tensors:
        for r in gc.get_referrers(t):
            if id(r) in ignore:
                continue
            attr = None if type(r) in _CONTAINERS else _attribute_of(r, t)
            if type(r) in _CONTAINERS or attr is not None:
                owners.append((r, attr))
        if owners:
            break
    if not owners:
        return UNCONTAINED, "", None, False
    ids = {id(o) for o, _ in owners}
    # A container inside a container (a request's (key, value) tuple in a list): the ones that
    # hold it, a few levels up, may be what the program names.
    outer = _enclosing(owners, ignore)
    ids.update(outer)
    names = named(torch, frame, lambda o: id(o) in ids)
    for o, attr in owners:
        if id(o) in names:
            if attr is not None:
                return TENSORS, "attribute `%s` of `%s`" % (attr, names[id(o)]), None, True
            return TENSORS, "%s `%s`" % (type(o).__name__, names[id(o)]), len(o), True
    # The outermost the program names: the list a request's containers are appended to, not
    # one of its items (`kv_log[3]`).
    for key, o in reversed(list(outer.items())):
        if key in names:
            return TENSORS, "%s `%s`" % (type(o).__name__, names[key]), len(o), True
    o, attr = owners[0]
    if type(o) is dict:
        # The dict may be an object's attributes: name the object.
        for owner in gc.get_referrers(o):
            if getattr(owner, "__dict__", None) is o:
                o, attr = owner, _attribute_of(owner, tensors[0])
                break
    if attr is not None and _only_a_cycle(o, ignore):
        return CYCLE, "a `%s` object (attribute `%s`)" % (type(o).__name__, attr), None, False
    if attr is not None:
        return TENSORS, "attribute `%s` of a `%s` object" % (attr, type(o).__name__), None, False
    for referrer in gc.get_referrers(o):
        if id(referrer) in ignore:
            continue
        # The container is an object's attribute: held in the object's attribute dict, or (an
        # object whose attributes Python keeps inline, 3.11 on) by the object itself.
        if type(referrer) is dict:
            owners_of = [x for x in gc.get_referrers(referrer)
                         if getattr(x, "__dict__", None) is referrer]
        else:
            owners_of = [referrer]
        for owner in owners_of:
            name = _attribute_of(owner, o)
            if name is not None:
                return TENSORS, "%s `%s` of the `%s` object" % (
                    type(o).__name__, name, type(owner).__name__), len(o), False
    return TENSORS, "a %s" % type(o).__name__, len(o), False


_HOLDER_TRIES = 6  # new tensors of a group whose holders are looked for


def _holder_of_group(torch, frame, tensors, new_ids):
    """What holds a group's new tensors: a few of them, spread over the group, each asked in
    turn (some may be a forward's output still on its way to the program, held by a container
    of its own for now), the first holder the program names winning; else the first found:
    (kind, words, items). The
    tensors are reached by their place in `tensors` (the census's list, which `_holder` knows
    for ours): no other list of ours may refer to them."""
    places = [i for i, t in enumerate(tensors) if id(t) in new_ids]
    first = None
    for i in places[::max(1, len(places) // _HOLDER_TRIES)][:_HOLDER_TRIES]:
        *found, named_by_program = _holder(torch, frame, [tensors[i]], tensors)
        if named_by_program:
            return tuple(found)
        first = first or tuple(found)
    return first or (UNCONTAINED, "", None)


def grown(torch, frame, first, second, steps):
    """[Row] for the groups that grew between two counts (`census` results; the second's tensors
    are sampled for holders), largest first; then the named tensors whose autograd graph grew
    (`GRAPH` rows: `count` the nodes it gained, `bytes` 0, `holder` the tensor's name)."""
    (g1, graphs1), (g2, graphs2, tensors) = first[:2], second
    out = []
    for key, (count, nbytes, ids) in g2.items():
        c0, b0, ids0 = g1.get(key, (0, 0, set()))
        dc, db = count - c0, nbytes - b0
        if dc <= 0 or (db < _MIN_GROUP_BYTES and dc < steps):
            continue
        out.append((db, dc, key, ids - ids0))
    out.sort(key=lambda row: (row[0], row[1]), reverse=True)
    result = []
    for db, dc, key, new_ids in out[:_MAX_GROUPS]:
        kind, holder, items = _holder_of_group(torch, frame, tensors, new_ids)
        result.append(Row(kind, dc, max(db, 0), *key, holder, items))
    for name, (nodes, key) in graphs2.items():
        before = graphs1.get(name, (0, None))[0]
        # The same tensor's graph, grown (a running total); a new tensor with its own small
        # graph each step is the tensor groups' story.
        if before and nodes - before >= steps:
            result.append(Row(GRAPH, nodes - before, 0, *key, name, None))
    return result


_GROWING = (list, dict, set, deque)  # the containers a program keeps things in
_SAMPLE_ITEMS = 16  # new items of a grown container whose size is measured
_MAX_ITEM_PARTS = 256  # objects one level into an item that are measured


def containers(torch, frame):
    """{id: (name, type, length, size, container)} of the containers the program names (see
    `breakdown.named`). The first count keeps no container: `keep_only_lengths` drops them."""
    found = {}
    names = named(torch, frame, lambda o: type(o) in _GROWING, found)
    return {k: (names[k], type(o), len(o), sys.getsizeof(o), o) for k, o in found.items()}


def keep_only_lengths(count):
    """A container count without the containers (held until the second count only weakly: not
    at all)."""
    return {k: v[:4] for k, v in count.items()}


def _size(obj, Tensor):
    """`obj`'s bytes with the objects one level in (a list of ints, a dict's keys and values; a
    tensor's storage), the first `_MAX_ITEM_PARTS` of them measured and the rest counted at
    their mean."""
    if isinstance(obj, Tensor):
        return _storage_key(obj)[1]
    size = sys.getsizeof(obj)
    if isinstance(obj, (list, tuple, set, frozenset, deque)):
        parts, whole = list(islice(obj, _MAX_ITEM_PARTS)), len(obj)
    elif isinstance(obj, dict):  # an OrderedDict too (a state_dict)
        parts = [p for kv in islice(obj.items(), _MAX_ITEM_PARTS // 2) for p in kv]
        whole = 2 * len(obj)
    else:
        attrs = getattr(obj, "__dict__", None)
        parts = list(islice(attrs.values(), _MAX_ITEM_PARTS)) if type(attrs) is dict else []
        whole = len(parts)
    if parts:
        measured = sum(_storage_key(p)[1] if isinstance(p, Tensor) else sys.getsizeof(p)
                       for p in parts)
        size += measured * whole // len(parts)
    return size


def _new_items(container, gained):
    """Up to `_SAMPLE_ITEMS` of the items a container gained last (a dict's newest keys with
    their values; any of a set's)."""
    n = min(gained, _SAMPLE_ITEMS)
    kind = type(container)
    if kind is dict:
        return [(k, container[k]) for k in islice(reversed(container), n)]
    if kind in (list, deque):
        return [container[-1 - i] for i in range(n)]
    return list(islice(container, n))


def objects_grown(torch, first, second, steps, tensors_counted=True):
    """[Row] for the containers that gained at least an item a step between two counts
    (`containers` results), largest first; `dtype` says what the new items are (a dict's
    values). With `tensors_counted` (the tensor groups were counted too, and their rows name
    what holds them) a container whose new items are tensors is left to them."""
    Tensor = torch.Tensor
    out = []
    for key, (name, kind, length, size, container) in second.items():
        before = first.get(key)
        if before is None or before[0] != name or before[1] is not kind:
            continue
        gained = length - before[2]
        if gained < max(steps, 1):
            continue
        try:
            items = _new_items(container, gained)
        except Exception:  # changed while we looked, or a subclass that says no
            continue
        # A dict's item is (key, value): the value is what it keeps.
        values = [item[1] if kind is dict else item for item in items]
        if not values or (tensors_counted and any(isinstance(v, Tensor) for v in values)):
            continue
        per_item = sum(_size(item[0], Tensor) + _size(item[1], Tensor) if kind is dict
                       else _size(item, Tensor) for item in items) / len(items)
        nbytes = int(per_item * gained) + max(size - before[3], 0)
        if nbytes < _MIN_GROUP_BYTES:
            continue
        out.append(Row(OBJECTS, gained, nbytes, "", type(values[0]).__name__, "", "",
                       "%s `%s`" % (kind.__name__, name), length))
    out.sort(key=lambda r: r.bytes, reverse=True)
    return out[:_MAX_GROUPS]
