"""What holds a leak, zero-code: when memory keeps rising at the end of iterations, the hooks
count the process's live tensors twice, some steps apart, and say which groups grew and what
holds them — what people find today by hand with `gc.get_objects()`.

- Suspicion (`Watch`): the memory in use at an iteration's end (`memory_now`: the CUDA
  allocator's allocated bytes once CUDA is up, else glibc's bytes in use, else the RSS; read at
  iteration ends at least `READING_GAP_S` apart) rose at each of the last `RISES` readings and
  by at least `MIN_RISE_BYTES` in all; or, for a slow rise, the floor of those readings (the
  lowest of each `FLOOR_READINGS`) did, its counts then farther apart. Nothing else runs per
  step.
- A count (`census`): every tensor `gc.get_objects()` returns, grouped by device, dtype, shape
  and the autograd node that made it; each storage counted once. Plus, for the tensors the
  program names (a variable, an attribute, one level in) that carry an autograd graph, the size
  of that graph: a running total summed without `.item()` keeps every step's graph behind one
  tensor, which a count of tensors never sees.
- Containers (`objects`): the lists, dicts, sets and deques the program names (its module
  globals and the stack's variables, one level in; a queue's deque), by length, at the same two
  counts. One whose new items of Python objects (a tokenizer's cache, a list of results, a
  profiler's windows) keep at least `_MIN_GROUP_BYTES`, however few, is sent as an `objects` row
  with its new items' size sampled. Memory that grows as Python objects is named as tensors are.
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
from collections import namedtuple

from oomscope._hooks.breakdown import instances, named, subclasses
from oomscope._hooks.referrers import Referrers
from oomscope._hooks.retainer import CONTAINERS as _CONTAINERS
from oomscope._hooks.retainer import attribute_of, attribute_owner, common

RISES = 4  # consecutive rising iteration ends before a count
# An eval's batches: 8 rising before a count, so that a short eval (a validation of 10 batches)
# is never counted (its counts could not pair within it, and their passing allocations move the
# C allocator's heap under the eval's own growth, which the analysis reads from the RSS).
EVAL_RISES = 8
MIN_RISE_BYTES = 1 << 20  # over those rises
APART = 8  # iterations between the two counts
EVAL_APART = 4  # an eval's batches between its two counts
COOLDOWN = 64  # iterations after a pair before the next suspicion (doubles each time)
# A slow rise (a few KiB a step: a log of records, a cache, a profiler's events) never rises at
# `RISES` readings in a row by `MIN_RISE_BYTES`: its floor does. The lowest reading of each
# `FLOOR_READINGS` readings, rising at each of the last `FLOOR_RISES` by `MIN_RISE_BYTES` in all,
# starts a pair too, its counts `FLOOR_APART` times farther apart (a slow rise needs the span
# to show in a count).
FLOOR_READINGS = 16
FLOOR_RISES = 4
FLOOR_APART = 4
# Iteration ends read no more often than this (seconds): a loop of 4 ms steps paid ~10 us a
# step for a reading at each (the call's Python, out of the CPU's caches by then).
READING_GAP_S = 0.01
# A reading's own time is at most this share of the time between readings: where glibc's count
# is slow (~0.7 ms with many freed tensors, a serving loop's) readings come farther apart.
READING_COST_SHARE = 0.005
_MIN_GROUP_BYTES = 64 << 10  # a group's growth below this (and below one tensor a step) is noise
_MAX_GROUPS = 8  # groups sent per pair
_MAX_GRAPH_NODES = 200_000  # autograd nodes walked per named tensor
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes():
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
    return in_use if in_use is not None else rss_bytes()


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
        self.floors = []  # the lowest reading of each of the last windows (`FLOOR_READINGS`)
        self.window = None  # (readings, lowest) of the window being read
        self.slow = False  # the pair under way was started by the floor: counted farther apart

    def due(self, iteration, reading, floor=None):
        """'first', 'second' or None; `floor`, what the floor reads (`reading` by default)."""
        if self.first is not None:
            apart = self.apart * (FLOOR_APART if self.slow else 1)
            return "second" if iteration >= self.first[0] + apart else None
        if iteration < self.quiet_until or reading is None:
            return None
        self.readings.append(reading)
        del self.readings[:-(self.rises + 1)]
        r = self.readings
        if len(r) == self.rises + 1 and all(b > a for a, b in zip(r, r[1:])) and \
                r[-1] - r[0] >= MIN_RISE_BYTES:
            self.slow = False
            return "first"
        floor = reading if floor is None else floor
        n, low = self.window or (0, floor)
        n, low = n + 1, min(low, floor)
        self.window = (n, low)
        if n < FLOOR_READINGS:
            return None
        self.window = None
        self.floors.append(low)
        del self.floors[:-(FLOOR_RISES + 1)]
        f = self.floors
        if len(f) == FLOOR_RISES + 1 and all(b > a for a, b in zip(f, f[1:])) and \
                f[-1] - f[0] >= MIN_RISE_BYTES:
            self.slow = True
            self.floors = []
            return "first"
        return None

    def done(self, iteration):
        self.first = None
        self.readings = []
        self.floors = []
        self.window = None
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
_MAX_CYCLE = 16  # objects followed back through referrers to tell a garbage cycle


def _only_a_cycle(obj, ignore, refs):
    """True when every object that refers to `obj`, followed back up to `_MAX_CYCLE` objects,
    is one of those objects (or an attribute dict of one): nothing the program reaches holds it,
    only a reference cycle, which the garbage collector frees when it next runs. (A running
    function's local variables are not visible to `gc.get_referrers`; the census asks this only
    of tensors that grew one a step, which locals cannot hold.)"""
    seen = {id(obj): obj}
    queue = [obj]
    while queue:
        o = queue.pop()
        for r in refs.of(o):
            if id(r) in ignore or id(r) in seen or r is queue:
                continue
            if type(r) is dict and any(getattr(x, "__dict__", None) is r for x in seen.values()):
                continue
            if len(seen) >= _MAX_CYCLE or type(r).__name__ in ("frame", "module"):
                return False
            seen[id(r)] = r
            queue.append(r)
    return len(seen) > 1 or any(r is obj for r in refs.of(obj))


_ENCLOSING_LEVELS = 3  # containers followed up from a tensor's own
_MAX_ENCLOSING = 64  # containers looked at on the way


def _enclosing(owners, ignore, refs):
    """{id: container} of the containers that hold the owners' containers, up to
    `_ENCLOSING_LEVELS` up, nearest first (bounded). Our own lists and dicts, which refer to
    the same objects, are never taken."""
    found = {}
    level = [o for o, attr in owners if attr is None]
    for _ in range(_ENCLOSING_LEVELS):
        up = []
        ours = {id(found), id(level), id(up), id(owners), *map(id, owners), *ignore}
        refs.fetch(level)  # the whole level in one scan
        for o in level:
            for r in refs.of(o):
                if type(r) in _CONTAINERS and id(r) not in ours and id(r) not in found:
                    found[id(r)] = r
                    up.append(r)
                    if len(found) >= _MAX_ENCLOSING:
                        return found
        level = up
    return found


def _prefetch(refs, samples):
    """What `_holder` will ask of `refs` for these tensors, asked at once: their referrers in one
    scan, then each level of the containers above them (`_enclosing`) in one scan a level."""
    refs.fetch(samples)
    seen = set()
    level = [r for t in samples for r in refs.of(t) if type(r) in _CONTAINERS]
    for _ in range(_ENCLOSING_LEVELS):
        level = [o for o in level if id(o) not in seen][:_MAX_ENCLOSING * _HOLDER_TRIES]
        seen.update(map(id, level))
        refs.fetch(level)
        level = [r for o in level for r in refs.of(o) if type(r) in _CONTAINERS]
    level = None


def _holder(torch, frame, tensors, census_list, refs):
    """(kind, words, items, named) for what holds these tensors: the first container or object
    among their referrers, named as the program names it (`items`: a container's length;
    `named`: a name of the program's, a global or a local, says it); `CYCLE` when only a
    reference cycle holds it, `UNCONTAINED` when no Python container does. `census_list` is the
    census's own list (a referrer of every tensor, not the program's); `refs` answers who refers
    to what (`Referrers`)."""
    ignore = {id(tensors), id(census_list)}
    owners = []
    for t in tensors:
        for r in refs.of(t):
            if id(r) in ignore:
                continue
            attr = None if type(r) in _CONTAINERS else attribute_of(r, t)
            if type(r) in _CONTAINERS or attr is not None:
                owners.append((r, attr))
        if owners:
            break
    if not owners:
        return UNCONTAINED, "", None, False
    ids = {id(o) for o, _ in owners}
    # A container inside a container (a request's (key, value) tuple in a list): the ones that
    # hold it, a few levels up, may be what the program names.
    outer = _enclosing(owners, ignore, refs)
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
        for owner in refs.of(o):
            if getattr(owner, "__dict__", None) is o:
                o, attr = owner, attribute_of(owner, tensors[0])
                break
    if attr is not None and _only_a_cycle(o, ignore, refs):
        return CYCLE, "a `%s` object (attribute `%s`)" % (type(o).__name__, attr), None, False
    if attr is not None:
        return TENSORS, "attribute `%s` of a `%s` object" % (attr, type(o).__name__), None, False
    held_as = attribute_owner(o, ignore, refs)
    if held_as is not None:
        return TENSORS, "%s `%s` of the `%s` object" % (
            type(o).__name__, held_as[1], type(held_as[0]).__name__), len(o), False
    # A cache a function keeps (functools.lru_cache's, in C: no attribute holds it), named as
    # the program names the function.
    keepers = [r for r in refs.of(o)
               if id(r) not in ignore and callable(r) and type(r) not in _CONTAINERS]
    if keepers:
        ids_of = {id(k) for k in keepers}
        names = named(torch, frame, lambda x: id(x) in ids_of)
        for k in keepers:
            if id(k) in names:
                return TENSORS, "the cache of `%s`" % names[id(k)], len(o), True
    return TENSORS, "a %s" % type(o).__name__, len(o), False


_HOLDER_TRIES = 6  # new tensors of a group whose holders are looked for


def _samples(tensors, new_ids):
    """The places in `tensors` of a group's new tensors whose holders are looked for: a few,
    spread over the group."""
    places = [i for i, t in enumerate(tensors) if id(t) in new_ids]
    return places[::max(1, len(places) // _HOLDER_TRIES)][:_HOLDER_TRIES]


def _holder_of_group(torch, frame, tensors, places, refs):
    """What holds a group's new tensors: a few of them, spread over the group, each asked in
    turn (some may be a forward's output still on its way to the program, held by a container
    of its own for now), the first holder the program names winning; else the first found:
    (kind, words, items, named). The
    tensors are reached by their place in `tensors` (the census's list, which `_holder` knows
    for ours): no other list of ours may refer to them."""
    first = None
    for i in places:
        found = _holder(torch, frame, [tensors[i]], tensors, refs)
        if found[3]:
            return found
        first = first or found
    return first or (UNCONTAINED, "", None, False)


def _retainers(torch, frame, tensors, groups, holders, refs):
    """`holders` ((kind, words, items, named) of each group) with the container that keeps the
    new tensors of the most groups together (`retainer.common`) in place of a holder the program
    does not name: named as the program names it, else as an object's attribute."""
    if all(h[3] or h[0] != TENSORS for h in holders):
        return holders
    samples = [[tensors[i] for i in places] for *_, places in groups]
    chosen = common(samples, refs)
    samples = None
    ids = {id(c) for c in chosen if c is not None}
    names = named(torch, frame, lambda o: id(o) in ids) if ids else {}
    ignore = {id(tensors), id(chosen)}
    out = []
    for holder, c in zip(holders, chosen):
        if c is None or holder[3] or holder[0] != TENSORS:
            out.append(holder)
        elif id(c) in names:
            out.append((TENSORS, "%s `%s`" % (type(c).__name__, names[id(c)]), len(c), True))
        else:
            held_as = attribute_owner(c, ignore, refs)
            words = "a %s" % type(c).__name__ if held_as is None else "%s `%s` of the `%s` object" \
                % (type(c).__name__, held_as[1], type(held_as[0]).__name__)
            out.append((TENSORS, words, len(c), False))
    chosen[:] = []
    return out


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
    groups = [(db, dc, key, _samples(tensors, new_ids)) for db, dc, key, new_ids in
              out[:_MAX_GROUPS]]
    # Every group's sampled tensors in one scan of the collector's objects (`Referrers`).
    refs = Referrers(ignore={id(tensors), id(groups)})
    _prefetch(refs, [tensors[i] for *_, places in groups for i in places])
    holders = [_holder_of_group(torch, frame, tensors, places, refs) for *_, places in groups]
    holders = _retainers(torch, frame, tensors, groups, holders, refs)
    for (db, dc, key, _), (kind, holder, items, _) in zip(groups, holders):
        result.append(Row(kind, dc, max(db, 0), *key, holder, items))
    refs = None
    for name, (nodes, key) in graphs2.items():
        before = graphs1.get(name, (0, None))[0]
        # The same tensor's graph, grown (a running total); a new tensor with its own small
        # graph each step is the tensor groups' story.
        if before and nodes - before >= steps:
            result.append(Row(GRAPH, nodes - before, 0, *key, name, None))
    return result
