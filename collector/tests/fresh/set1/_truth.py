"""Self-measurement helpers for the set1 programs (no oomscope involved).

Every program calls `write(**facts)` once at the end; nothing is written
unless the environment variable ZOO_TRUTH names a file.
"""
import json
import os
import resource
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
_T0 = time.monotonic()


def rss_bytes(pid="self"):
    """Resident set size of one process, from /proc/PID/statm."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def peak_rss_bytes():
    """High-water mark of this process's RSS (ru_maxrss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def smaps_rollup(pid="self"):
    """Fields of /proc/PID/smaps_rollup in bytes (Rss, Pss, Private_Dirty, ...)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


def children(pid=None):
    """All descendant pids of `pid` (default: this process)."""
    pid = pid or os.getpid()
    found = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            continue
        for k in kids:
            found.append(k)
            found.extend(children(k))
    return found


def tree_pss_bytes():
    """PSS of this process plus all its descendants."""
    return sum(smaps_rollup(p).get("Pss", 0) for p in [os.getpid()] + children())


def storage_bytes(tensors):
    """Bytes of the distinct storages behind an iterable of tensors."""
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[(s.data_ptr(), s.nbytes())] = s.nbytes()
    return sum(seen.values())


def elapsed_s():
    return round(time.monotonic() - _T0, 2)


def write(**facts):
    path = os.environ.get("ZOO_TRUTH")
    facts.setdefault("peak_rss_bytes", peak_rss_bytes())
    facts.setdefault("runtime_s", elapsed_s())
    facts.setdefault("program", os.path.basename(sys.argv[0]))
    if not path:
        return
    with open(path, "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True, default=float)
        f.write("\n")
