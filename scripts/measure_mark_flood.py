"""Several processes marking in bursts at once: how many marks reach the trace.

    collector run -q -o /tmp/f.oomt -- python3 scripts/measure_mark_flood.py [SENDERS] [MARKS]
    OOMSCOPE_RING=0 collector run ...   # the same, as datagrams only

Each sender marks MARKS times in bursts of six (a step's stages) with 0.5 ms between bursts, as
ranks of a fast loop under one collector do. Prints what the helpers had to drop (the socket's
queue holds ten datagrams; a ring holds 256 KiB); the trace's mark count is the rest
(`collector summary`).
"""

import subprocess
import sys
import time


def sender(marks):
    from oomscope._probe import default_probe

    p = default_probe()
    for i in range(marks):
        p._mark("stage_%d" % (i % 6), step=i)
        if i % 6 == 5:
            time.sleep(0.0005)
    p.flush()
    print(p.transport.dropped, p.transport._ring is not None)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--sender":
        return sender(int(sys.argv[2]))
    senders = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    marks = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
    procs = [subprocess.Popen([sys.executable, __file__, "--sender", str(marks)],
                              stdout=subprocess.PIPE, text=True) for _ in range(senders)]
    outs = [p.communicate()[0].split() for p in procs]
    dropped = sum(int(o[0]) for o in outs)
    print("%d senders x %d marks: %d dropped by the helpers (%.1f%%); senders with a ring: %d" % (
        senders, marks, dropped, 100.0 * dropped / (senders * marks),
        sum(o[1] == "True" for o in outs)))


if __name__ == "__main__":
    main()
