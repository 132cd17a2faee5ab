"""What a zoo program measured of itself, independently of oomscope: written as one JSON object
to the file `ZOO_TRUTH` names (nothing when it is unset, so each program also runs alone).
The zoo's programs import only this helper, never oomscope."""

import json
import os


def storage_bytes(tensors):
    """Bytes of the distinct storages behind `tensors` (a view counts its storage once)."""
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def rss_bytes():
    """This process's resident bytes now (`/proc/self/statm`): what the kernel counts, the same
    quantity oomscope reads as `host.rss`, measured here without it."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def workers_private_bytes(loader):
    """The private bytes (`smaps_rollup`: Private_Clean + Private_Dirty) of a DataLoader's
    persistent workers now, all together: what oomscope reads of each worker's memory, read here
    by the program itself."""
    total = 0
    for w in loader._iterator._workers:
        try:
            with open("/proc/%d/smaps_rollup" % w.pid) as f:
                for line in f:
                    if line.startswith(("Private_Clean:", "Private_Dirty:")):
                        total += int(line.split()[1]) * 1024
        except OSError:  # gone
            pass
    return total


def write(**facts):
    path = os.environ.get("ZOO_TRUTH")
    if path:
        with open(path, "w") as f:
            json.dump(facts, f)
