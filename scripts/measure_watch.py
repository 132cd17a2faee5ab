"""Measures `collector watch` on a long trace still being written (issue 43's numbers).

The trace (e.g. a day at 100 Hz: `cargo run --release -p oomscope-words --example demo --
--day day.oomt`) is copied to a scratch file up to its last PERCENT %, a watcher (`--plain`) is
started on the copy and given time to read and analyse it, then the rest is appended in equal
pieces, one about every second (at random moments, so that the writer does not lock onto the
watcher's refreshes), as a recorder flushes. Reported: the watcher's CPU while the run goes
on (share of one core, from /proc), its peak RSS against the trace's size, and how long after
each piece was written the watcher printed a line (sample to screen).

usage: python3 scripts/measure_watch.py COLLECTOR TRACE [SECONDS] [PERCENT]
"""

import os
import random
import select
import subprocess
import sys
import tempfile
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    collector, source = sys.argv[1], sys.argv[2]
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    percent = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    with open(source, "rb") as f:
        data = f.read()
    # The end record comes last: keep it out, so the run is still going when the pieces stop.
    head = int(len(data) * (1 - percent / 100))
    rest = data[head:-64]
    piece = max(1, len(rest) // seconds)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "live.oomt")
        with open(path, "wb") as f:
            f.write(data[:head])
        started = time.monotonic()
        watcher = subprocess.Popen(
            [collector, "watch", "--plain", path],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        out = watcher.stdout
        # The first line: the file read and analysed.
        out.readline()
        first_s = time.monotonic() - started
        cpu0 = cpu_seconds(watcher.pid)
        t0 = time.monotonic()
        latencies = []
        with open(path, "ab") as f:
            for i in range(seconds):
                f.write(rest[i * piece:(i + 1) * piece])
                f.flush()
                written = time.monotonic()
                # The watcher's next line (a piece that completes no chunk prints none).
                deadline = written + 2.0
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    ready, _, _ = select.select([out], [], [], left)
                    if ready:
                        out.readline()
                        latencies.append(time.monotonic() - written)
                        break
                time.sleep(max(0.0, written + random.uniform(0.5, 1.5) - time.monotonic()))
        cpu = cpu_seconds(watcher.pid) - cpu0
        wall = time.monotonic() - t0
        rss = peak_rss_bytes(watcher.pid)
        watcher.kill()
        watcher.wait()
    latencies.sort()
    print(f"trace {len(data) / 1e6:.1f} MB; first line after {first_s:.2f} s")
    print(f"watcher CPU while the run went on: {cpu:.2f} s over {wall:.1f} s = {100 * cpu / wall:.2f}% of a core")
    print(f"watcher peak RSS: {rss / 2**20:.0f} MiB = {rss / len(data):.2f}x the trace")
    if latencies:
        print(
            f"sample to screen: {len(latencies)} of {seconds} pieces printed, median "
            f"{1000 * latencies[len(latencies) // 2]:.0f} ms, max {1000 * latencies[-1]:.0f} ms"
        )


if __name__ == "__main__":
    main()
