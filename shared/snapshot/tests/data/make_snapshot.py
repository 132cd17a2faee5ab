"""Writes a synthetic PyTorch memory snapshot with torch's exact structure and sharing pattern.

`torch.cuda.memory._dump_snapshot()` pickles the dict `torch._C._cuda_memorySnapshot()` builds:
`segments` (the allocator's state at dump time, blocks with their stacks), `device_traces` (one
ring buffer of entries per device), `allocator_settings`. Python's pickler memoizes by identity,
so, as in torch: frame dicts are shared by every stack that passes through them, a stack list is
shared by the alloc entry, the free entries and the still-live block it made, and key strings
are shared everywhere. Sizes and addresses are real-sized ints (addresses > 2**32, one stream
pointer >= 2**63 so it pickles as a 9-byte LONG1).

The run: weights and optimizer state allocated first (their entries fall out of the ring
buffer), then `steps` training steps: activations allocated in forward and freed in backward, and
one tensor per step kept in a list (a leak at train.py:77); then an OOM. The facts the reader
must recover are written to `OUT.json`, computed here independently of oomscope.

    python3 make_snapshot.py OUT.pickle [--steps N] [--protocol P] [--max-entries M]
"""

import argparse
import json
import pickle

MIB = 1 << 20
BASE = 0x7F3A_0000_0000
STREAM = 2**63 + 0x1234  # a CUDA stream pointer that pickles as 9 bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--protocol", type=int, default=4)
    ap.add_argument("--max-entries", type=int, default=1_000_000)
    ap.add_argument("--depth", type=int, default=12, help="torch frames below the user frames")
    args = ap.parse_args()

    frames = {}

    def frame(filename, line, name):
        key = (filename, line, name)
        if key not in frames:
            frames[key] = {"filename": filename, "line": line, "name": name}
        return frames[key]

    torch_frames = [
        frame(f"/usr/lib/python3.12/site-packages/torch/nn/modules/module{i}.py", 100 + i, "_call_impl")
        for i in range(args.depth)
    ]
    main_frame = frame("/home/me/train.py", 120, "<module>")

    def stack(line, name):
        # Innermost first: torch's frames, then the user's line, then the script's top.
        return torch_frames + [frame("/home/me/train.py", line, name), main_frame]

    events = []  # (entry, stack) in order, every one the program did
    live = {}  # addr -> (size, stack)
    next_addr = [BASE]
    clock = [1_759_252_584_204_770]

    pool = {}  # size -> [addr]: freed blocks the caching allocator hands out again

    def alloc(size, st):
        if pool.get(size):
            addr = pool[size].pop()
        else:
            addr = next_addr[0]
            next_addr[0] += size
        clock[0] += 10
        live[addr] = (size, st)
        events.append({"action": "alloc", "addr": addr, "size": size, "stream": STREAM,
                       "time_us": clock[0], "frames": st, "compile_context": "", "user_metadata": ""})
        return addr

    def free(addr):
        size, st = live.pop(addr)
        pool.setdefault(size, []).append(addr)
        for action in ("free_requested", "free_completed"):
            clock[0] += 5
            events.append({"action": action, "addr": addr, "size": size, "stream": STREAM,
                           "time_us": clock[0], "frames": st, "compile_context": "",
                           "user_metadata": ""})

    clock[0] += 1
    # One segment, reserved up front (its size is what the program ends up using plus a tail).
    seg = {"action": "segment_alloc", "addr": BASE, "size": 0, "stream": STREAM,
                   "time_us": clock[0], "frames": [], "compile_context": "", "user_metadata": ""}
    events.append(seg)
    alloc(512 * MIB, stack(30, "build_model"))
    alloc(1024 * MIB, stack(31, "build_optimizer"))
    active = [sum(s for s, _ in live.values())]
    trace = []
    for step in range(args.steps):
        acts = [alloc((64 + 16 * i) * MIB, stack(50 + i, "forward")) for i in range(4)]
        alloc(8 * MIB, stack(77, "train_step"))  # kept: history.append(loss)
        for a in acts:
            free(a)
    # The OOM: a request larger than what is left.
    clock[0] += 10
    events.append({"action": "oom", "addr": 0, "size": 20 << 30, "stream": STREAM,
                   "time_us": clock[0], "frames": stack(52, "forward"), "device_free": 3 * MIB,
                   "compile_context": "", "user_metadata": ""})

    # The ring buffer keeps the last max_entries; the facts are those the window shows.
    window = events[-args.max_entries:]
    first_kept = len(events) - len(window)
    act = 0
    peak = 0
    peak_time = 0
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            act += e["size"]
        elif e["action"] == "free_completed":
            act -= e["size"]
        if i >= first_kept - 1 and act > peak:
            peak, peak_time = act, e["time_us"]

    used = next_addr[0] - BASE
    seg["size"] = used + 256 * MIB
    blocks = [{"address": a, "size": s, "requested_size": s - (s // 64), "state": "active_allocated",
               "frames": st} for a, (s, st) in sorted(live.items())]
    tail = 256 * MIB
    for size, addrs in pool.items():
        for a in addrs:
            blocks.append({"address": a, "size": size, "requested_size": 0, "state": "inactive",
                           "frames": []})
    blocks.append({"address": next_addr[0], "size": tail, "requested_size": 0,
                   "state": "inactive", "frames": []})
    blocks.sort(key=lambda b: b["address"])
    snapshot = {
        "segments": [{
            "device": 1, "address": BASE, "total_size": used + tail,
            "allocated_size": sum(s for s, _ in live.values()),
            "active_size": sum(s for s, _ in live.values()),
            "requested_size": sum(b["requested_size"] for b in blocks),
            "stream": STREAM, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks,
        }],
        "device_traces": [[], window],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0, "expandable_segments": False,
                               "roundup_power2_divisions": {"1": 0, "2": 0}},
        "external_annotations": [],
    }
    with open(args.out, "wb") as f:
        pickle.dump(snapshot, f, protocol=args.protocol)
    leak = sum(s for s, st in live.values() if st[args.depth]["line"] == 77)
    facts = {
        "device": 1,
        "entries": len(window),
        "peak_active_bytes": peak,
        "peak_time_us": peak_time,
        "end_active_bytes": sum(s for s, _ in live.values()),
        "leak_site": "train.py:77 (train_step)",
        "leak_bytes": leak,
        "oom_requested_bytes": 20 << 30,
        "oom_device_free_bytes": 3 * MIB,
        "unique_frames": len(frames),
    }
    with open(args.out + ".json", "w") as f:
        json.dump(facts, f, indent=1)


if __name__ == "__main__":
    main()
