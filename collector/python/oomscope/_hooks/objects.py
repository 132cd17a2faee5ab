"""What a leak's containers of Python objects gained, for the leak census (`held`): the lists,
dicts, sets and deques the program names (`breakdown.named`, queues' deques included), counted
twice, and the bytes a container's new items keep. Its own module: the census of tensors is
`held`'s, this is the census of objects beside it."""

import sys
from collections import deque
from itertools import islice

from oomscope._hooks.breakdown import named
from oomscope._hooks.held import _MAX_GROUPS, _MIN_GROUP_BYTES, OBJECTS, Row, _storage_key

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
        # Any gain counts that keeps enough bytes (a profiler's window of events every few
        # steps, a checkpoint a few times an epoch): what a holder retains, not how often.
        if gained < 1:
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
