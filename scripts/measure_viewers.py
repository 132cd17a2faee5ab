"""Measures a recorded program's step time with 0, 1 and 3 viewers attached (issue 43): a Python
loop of fixed CPU work, marked every step (the probe's marks, readings every 10 ms), recorded by
`collector run`, while N `collector watch --plain` processes follow its trace. Each count runs
ROUNDS times, interleaved; the noise is the spread between rounds of the same count.

usage: python3 scripts/measure_viewers.py COLLECTOR [ROUNDS] [STEPS]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = r"""
import sys, time, oomscope_probe as oom
steps = int(sys.argv[1])
times = []
for step in range(steps):
    t = time.perf_counter()
    oom.step(step)
    oom.mark("pre_forward", phase="train")
    x = 0
    for i in range(20000):
        x += i * i
    oom.mark("post_forward")
    oom.mark("post_backward")
    oom.mark("post_optimizer_step")
    times.append(time.perf_counter() - t)
times.sort()
print(sum(times) / len(times) * 1e3)
"""


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    collector = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "../collector/python"))
    env.setdefault("OOMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
    results = {0: [], 1: [], 3: []}
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "loop.py")
        with open(program, "w") as f:
            f.write(PROGRAM)
        for r in range(rounds):
            for viewers in results:
                trace = os.path.join(tmp, f"t{r}-{viewers}.oomt")
                watchers = [
                    subprocess.Popen(
                        [collector, "watch", "--plain", trace],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for _ in range(viewers)
                ]
                time.sleep(0.3)
                out = subprocess.run(
                    [collector, "run", "-q", "-o", trace, "--", sys.executable, program, str(steps)],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                for w in watchers:
                    w.wait(timeout=30)
                results[viewers].append(float(out.stdout.strip()))
    for viewers, ms in results.items():
        print(
            f"{viewers} viewer(s): mean step {statistics.mean(ms):.3f} ms "
            f"(rounds: {', '.join(f'{m:.3f}' for m in ms)}; spread {max(ms) - min(ms):.3f} ms)"
        )


if __name__ == "__main__":
    main()
