"""The moment memory runs out, seen from inside the process: the CUDA caching allocator's OOM
observer (called after a failed allocation, lock released, before the `OutOfMemoryError` is
raised; also for OOMs the program catches, so how the process ended tells fatal from caught),
what was alive then by source line and the whole memory snapshot (`--oom-snapshot`), and a
failed host allocation that ends the program (libtorch's `DefaultCPUAllocator`, `MemoryError`),
from `sys.excepthook`, which also takes our frames out of the program's tracebacks.
"""

import os
import sys

from oomscope._hooks.errors import interrupted, ours, replace, without_our_frames
from oomscope._hooks.memory import send_breakdown
from oomscope._hooks.state import S


def observer(device, alloc, total, free):
    try:
        if S.active is False:
            return
        torch = S.torch
        stats = torch._C._cuda_memoryStats(device)
        allocated = stats["allocated_bytes"]["all"]["current"]
        reserved = stats["reserved_bytes"]["all"]["current"]
        # PyTorch's own wording, with exact byte counts, as the text to show; the numbers travel
        # as fields of the record (allocated_bytes, reserved_bytes).
        text = ("CUDA out of memory (allocator observer). Tried to allocate %d bytes. GPU %d has a "
                "total capacity of %d bytes of which %d bytes is free. Of the allocated memory %d "
                "bytes is allocated by PyTorch, and %d bytes is reserved by PyTorch but "
                "unallocated." % (alloc, device, total, free, allocated,
                                  max(reserved - allocated, 0)))
        if not S.memory.oom_breakdown:
            # What the memory was at the first OOM, sent just before it (the analysis reads the
            # breakdown at or before an OOM).
            S.memory.oom_breakdown = True
            send_breakdown(force=True)
        S.probe.oom(text, source="allocator", stage=S.loop.stage, step=S.step_field(),
                    requested_bytes=alloc, device=device, free_bytes=free, total_bytes=total,
                    allocated_bytes=allocated, reserved_bytes=reserved)
        if S.cuda.snapshot:
            snapshot = torch.cuda.memory._snapshot()
            S.probe.alive(alive_by_line(snapshot))
            _save_snapshot(snapshot)
    except BaseException as e:
        interrupted(e)


def _save_snapshot(snapshot):
    """Pickles the first OOM's whole snapshot next to the trace, as `_dump_snapshot` would, and
    names the file in the trace (`memory_snapshot`: the report bakes the two together). Written
    to a temporary name first, so a half-written file never looks like a snapshot."""
    prefix, S.cuda.snapshot_prefix = S.cuda.snapshot_prefix, None
    if not prefix:
        return
    import pickle

    path = "%s%d.pickle" % (prefix, os.getpid())
    partial = path + ".partial"
    with open(partial, "wb") as f:
        pickle.dump(snapshot, f)
    os.replace(partial, path)
    S.probe.memory_snapshot(os.path.basename(path))


def _user_frame(frames, skip):
    for frame in frames:
        name = frame.get("filename") or ""
        if not name or name.startswith("<") or ours(name) or any(part in name for part in skip):
            continue
        return frame
    return None


def alive_by_line(snapshot, top=20):
    """Reduces a `torch.cuda.memory._snapshot()` to the live blocks grouped by the first frame in
    the program's own code: [(filename, line, function, bytes, count)], largest first, at most
    `top` rows, then one row `("<other>", 0, "", bytes, count)` for the rest and
    `("<unknown>", 0, "", ...)` for blocks recorded before history was on."""
    import sysconfig

    skip = ["/torch/", "/site-packages/", "/dist-packages/"]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            skip.append(path + os.sep)
    groups = {}
    for segment in snapshot.get("segments", ()):
        for block in segment.get("blocks", ()):
            if block.get("state") != "active_allocated":
                continue
            frame = _user_frame(block.get("frames") or (), skip)
            if frame is None:
                key = ("<unknown>", 0, "")
            else:
                key = (frame.get("filename", "?"), int(frame.get("line", 0)), frame.get("name", ""))
            size = int(block.get("requested_size") or block.get("size") or 0)
            bytes_count = groups.get(key, (0, 0))
            groups[key] = (bytes_count[0] + size, bytes_count[1] + 1)
    rows = sorted(((k[0], k[1], k[2], v[0], v[1]) for k, v in groups.items()),
                  key=lambda r: (-r[3], r[0], r[1]))
    if len(rows) > top:
        rest = rows[top:]
        rows = rows[:top] + [("<other>", 0, "", sum(r[3] for r in rest), sum(r[4] for r in rest))]
    return rows


def host_error(value):
    """The line to send of an uncaught exception that may be a failed host allocation, else None.
    Whether it is one, and what it asked for, the collector's one recogniser of out-of-memory
    texts decides (`oomscope_analysis::oom_text`, held to a corpus of real errors): this only
    spares it the exceptions that name no memory at all."""
    text = str(value)
    first = text.strip().splitlines()[0] if text.strip() else type(value).__name__
    if isinstance(value, MemoryError):
        return "MemoryError: " + first if first != "MemoryError" else first
    for line in text.splitlines():
        lowered = line.lower()
        if "alloc" in lowered or "memory" in lowered:
            return line.strip()
    return None


def patch_excepthook():
    def make(previous):
        def excepthook(kind, value, traceback):
            try:
                traceback = without_our_frames(traceback)
                seen = 0
                chained = value
                while chained is not None and seen < 16:  # the causes printed with it, too
                    chained.__traceback__ = without_our_frames(chained.__traceback__)
                    chained = chained.__cause__ or chained.__context__
                    seen += 1
            except BaseException as e:
                interrupted(e)
            try:
                line = host_error(value)
                if line is not None and S.active is not False:
                    S.probe.oom(line, source="host_error", stage=S.loop.stage,
                                step=S.step_field())
            except BaseException as e:
                interrupted(e)
            previous(kind, value, traceback)
        return excepthook

    replace(sys, "excepthook", make)
