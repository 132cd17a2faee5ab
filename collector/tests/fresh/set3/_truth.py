"""Self-measurement helpers for the set3 programs (copied from set2, extended).

Every program imports this module (it sits next to the programs) and writes
its own measured "truth" with ``write(**facts)``: one JSON object to the file
named by the environment variable ZOO_TRUTH.  When ZOO_TRUTH is unset nothing
is written.  Nothing here changes what the program does with memory beyond a
few small lists of numbers.
"""
import gc
import json
import os
import resource
import time

_T0 = time.monotonic()
PAGE = os.sysconf("SC_PAGE_SIZE")


def elapsed():
    """Seconds since this module was imported (≈ since the program started)."""
    return time.monotonic() - _T0


def rss():
    """Resident set size of this process in bytes (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def peak_rss():
    """Peak RSS of this process in bytes (getrusage ru_maxrss, kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def status_fields(pid="self"):
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem ... from /proc/PID/status, in bytes."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def hwm():
    """High-water mark of RSS (VmHWM) in bytes; resettable with reset_peak()."""
    return status_fields().get("VmHWM", 0)


def reset_peak():
    """Reset VmHWM to the current RSS (Linux clear_refs 5). Returns True on success."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def smaps_rollup(pid="self"):
    """Fields of /proc/PID/smaps_rollup in bytes ({} if the process is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def children(pid=None):
    """All descendant pids of PID (default: this process), depth first."""
    pid = os.getpid() if pid is None else pid
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        for k in kids:
            found.append(k)
            found.extend(children(k))
    return found


def private_bytes(pid="self"):
    r = smaps_rollup(pid)
    return r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)


def children_rollup():
    """Per-child {pid: {"private": b, "pss": b, "rss": b, "anon": b}} for all descendants."""
    out = {}
    for pid in children():
        r = smaps_rollup(pid)
        if not r:
            continue
        out[pid] = {
            "private": r.get("Private_Clean", 0) + r.get("Private_Dirty", 0),
            "pss": r.get("Pss", 0),
            "rss": r.get("Rss", 0),
            "anon": r.get("Anonymous", 0),
        }
    return out


def children_private():
    """Sum of private (clean+dirty) bytes of all descendant processes."""
    return sum(v["private"] for v in children_rollup().values())


def tree_pss():
    """PSS of this process plus all its descendants, in bytes."""
    total = smaps_rollup().get("Pss", 0)
    for pid in children():
        total += smaps_rollup(pid).get("Pss", 0)
    return total


def shm_used(path="/dev/shm"):
    """Bytes in use on the tmpfs at PATH (includes unlinked-but-mapped segments)."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def storage_bytes(tensors):
    """Bytes of the distinct storages behind an iterable of tensors."""
    seen = {}
    for t in tensors:
        try:
            s = t.untyped_storage()
        except AttributeError:
            continue
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def walk_tensors(obj, _seen=None):
    """Yield every torch.Tensor reachable through dicts, lists, tuples, sets,
    deques, optimizer state and module parameters/buffers of OBJ."""
    import torch
    if _seen is None:
        _seen = set()
    if id(obj) in _seen:
        return
    _seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, torch.nn.Module):
        for t in obj.state_dict(keep_vars=True).values():
            yield t
            if t.grad is not None:
                yield t.grad
    elif isinstance(obj, torch.optim.Optimizer):
        for st in obj.state.values():
            yield from walk_tensors(st, _seen)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from walk_tensors(v, _seen)
    elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
        for v in obj:
            yield from walk_tensors(v, _seen)
    elif hasattr(obj, "__dict__"):
        yield from walk_tensors(vars(obj), _seen)


def gc_freed():
    """RSS freed by a full gc.collect(): (objects collected, bytes of RSS dropped)."""
    before = rss()
    n = gc.collect()
    return n, before - rss()


def slope(xs, ys):
    """Least-squares slope of ys against xs (0.0 when degenerate)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def correlation(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sxx * syy) ** 0.5


def _clean(v):
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and callable(v.item):
        return _clean(v.item())
    return v


def write(**facts):
    """Write FACTS (plus elapsed_s and peak_rss_bytes) as one JSON object to
    $ZOO_TRUTH; do nothing when ZOO_TRUTH is unset."""
    path = os.environ.get("ZOO_TRUTH")
    if not path:
        return
    facts.setdefault("elapsed_s", elapsed())
    facts.setdefault("peak_rss_bytes", peak_rss())
    with open(path, "w") as f:
        json.dump(_clean(facts), f, indent=1, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------
# set3 additions
# ---------------------------------------------------------------------------

MiB = 1024 * 1024

#: ZOO_SMOKE=1 shrinks every program to a few seconds (syntax / logic checks);
#: the truth it writes then is not meant for checking a tool.
SMOKE = os.environ.get("ZOO_SMOKE") == "1"


def pick(full, smoke):
    """FULL normally, SMOKE when ZOO_SMOKE=1."""
    return smoke if SMOKE else full


class Floor:
    """Lowest RSS reading per unit (step, request, epoch ...).

    Call sample() anywhere inside a unit (as often as you like) and
    end_unit() when the unit ends; floors[i] is the lowest reading of unit i,
    peaks[i] the highest.
    """

    def __init__(self):
        self.floors = []
        self.peaks = []
        self._lo = None
        self._hi = None

    def sample(self):
        r = rss()
        self._lo = r if self._lo is None else min(self._lo, r)
        self._hi = r if self._hi is None else max(self._hi, r)
        return r

    def end_unit(self):
        self.sample()
        self.floors.append(self._lo)
        self.peaks.append(self._hi)
        self._lo = self._hi = None

    def rate(self, skip_frac=0.1, upto=None):
        """Least-squares growth of the floor per unit, skipping the first
        SKIP_FRAC of units (warm-up) and stopping at UPTO (exclusive)."""
        ys = self.floors[:upto] if upto is not None else self.floors
        k = int(len(ys) * skip_frac)
        xs = list(range(k, len(ys)))
        return slope(xs, ys[k:])

    def summary(self, prefix):
        f = self.floors
        if not f:
            return {}
        return {
            prefix + "_units": len(f),
            prefix + "_floor_first": f[0],
            prefix + "_floor_last": f[-1],
            prefix + "_floor_min": min(f),
            prefix + "_floor_max": max(f),
            prefix + "_floors": list(f),
        }


def tail_slope(ys, skip_frac=0.1):
    """Slope of YS against its index, skipping the first SKIP_FRAC."""
    k = int(len(ys) * skip_frac)
    return slope(list(range(k, len(ys))), list(ys[k:]))


def holder_bytes(obj):
    """Bytes of distinct tensor storages reachable from OBJ (see walk_tensors)."""
    return storage_bytes(walk_tensors(obj))
