"""What the last exception's traceback keeps alive in a notebook's kernel, and freeing it.

After an error in a cell (a CUDA out of memory, a `MemoryError`, a `KeyboardInterrupt` in a long
loop), Python keeps the exception: `sys.last_exc` (3.12+), `sys.last_value`, `sys.last_traceback`,
and IPython keeps it in `last_execution_result.error_in_exec` and its formatter's `tb`. The exception's traceback keeps
every frame it passed through, and each frame its local variables: the batch, the activations,
the model built inside a function, tensors on the GPU included. `gc.collect()` and
`torch.cuda.empty_cache()` cannot free them, and users restart the kernel.

`kept(exc)` measures what the frames' locals hold (tensors by storage, each storage once; numpy
arrays; bytes and bytearrays; one level into lists, tuples and dicts), by frame and variable.
`release(ipython)` drops the references Python and IPython keep, so that memory can go back.
Module-level frames are not counted: their locals are the cell's globals, which the traceback
does not keep alone.
"""

import sys

# Rows shown: the largest variables.
TOP = 5


def _size(value, seen):
    """(bytes, device, what) of the memory `value` holds, each storage counted once; None when it
    holds none of the kinds measured."""
    nbytes = getattr(value, "nbytes", None)
    storage = getattr(value, "untyped_storage", None)
    if storage is not None and hasattr(value, "device"):  # a torch tensor
        try:
            s = storage()
            key = ("t", s.data_ptr(), str(value.device))
            if key in seen:
                return 0, str(value.device), "tensor"
            seen.add(key)
            return s.nbytes(), str(value.device), "%s[%s]" % (
                str(value.dtype).replace("torch.", ""), "x".join(str(d) for d in value.shape))
        except Exception:
            return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        if id(value) in seen:
            return 0, "cpu", type(value).__name__
        seen.add(id(value))
        return len(value), "cpu", type(value).__name__
    if isinstance(nbytes, int) and hasattr(value, "dtype"):  # a numpy array
        if id(value) in seen:
            return 0, "cpu", "array"
        seen.add(id(value))
        return nbytes, "cpu", "array"
    return None


def _holds(value, seen):
    """(bytes, device, what) for a value or a container of values (one level)."""
    one = _size(value, seen)
    if one is not None:
        return one
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return None
    total, device, n = 0, None, 0
    for item in items[:10000]:
        got = _size(item, seen)
        if got is not None:
            total += got[0]
            device = device or got[1]
            n += 1
    if not n:
        return None
    return total, device, "%s of %d" % (type(value).__name__, n)


def kept(exc):
    """[(bytes, frame's function, variable, device, what)], largest first, and the total."""
    rows, seen = [], set()
    tb = getattr(exc, "__traceback__", None)
    while tb is not None:
        frame = tb.tb_frame
        tb = tb.tb_next
        if frame.f_locals is frame.f_globals:
            continue
        for name, value in list(frame.f_locals.items()):
            got = _holds(value, seen)
            if got and got[0]:
                rows.append((got[0], frame.f_code.co_name, name, got[1], got[2]))
    rows.sort(key=lambda r: -r[0])
    return rows, sum(r[0] for r in rows)


def last_exception(ipython):
    """The exception Python and IPython keep from the last error, or None."""
    result = getattr(ipython, "last_execution_result", None)
    return (getattr(result, "error_in_exec", None) or getattr(sys, "last_exc", None)
            or getattr(sys, "last_value", None))


def release(ipython):
    """Drops the references to the last exception (and with it its traceback's frames): Python's
    `sys.last_*`, IPython's traceback formatter's copy (`InteractiveTB.tb`, kept for `%debug`
    and `%tb`) and its last result's. What is left is a cycle (the traceback's first frame holds
    the cell's result, which holds the exception): the caller's `gc.collect()` frees it."""
    for name in ("last_exc", "last_value", "last_traceback", "last_type"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    formatter = getattr(ipython, "InteractiveTB", None)
    if formatter is not None and getattr(formatter, "tb", None) is not None:
        try:
            formatter.tb = None
        except Exception:
            pass
    result = getattr(ipython, "last_execution_result", None)
    if result is not None:
        try:
            result.error_in_exec = None
        except Exception:
            pass


def format_bytes(n):
    """Bytes as the words crate writes them (`format_bytes`): three significant digits, binary
    units."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return ("%.3g %s" % (value, unit)) if value < 1000 else "%d %s" % (value, unit)
    return "%d B" % n


def words(rows, total):
    """The finding in one paragraph: how much, by frame and variable, and what to run."""
    shown = ", ".join("`%s` in %s() (%s, %s%s)" % (
        name, function, what, format_bytes(size), "" if device == "cpu" else " on " + device)
        for size, function, name, device, what in rows[:TOP])
    more = len(rows) - TOP
    return ("oomscope: the last error's traceback keeps %s alive in its frames' variables: %s%s. "
            "`%%oomscope release` frees it without restarting the kernel (it drops the "
            "references Python and IPython keep to the error: sys.last_value, "
            "sys.last_traceback, IPython's InteractiveTB.tb and last result, then collects)." % (
                format_bytes(total), shown, " and %d more" % more if more > 0 else ""))
