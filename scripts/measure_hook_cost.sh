#!/usr/bin/env bash
# What the zero-code hooks cost a fast loop, as the user pays it: CPU time (user + system) of the
# whole process tree — the program, its DataLoader workers and the collector — for the same
# program run plain, under `collector run --no-python-hooks` (recording only) and under
# `collector run` (recording and hooks; and the hooks with `OOMSCOPE_RING=0`, marks as datagrams
# instead of through the ring of shared memory), ROUNDS times each, interleaved so that all see the
# same machine. Prints each run and the medians; the hooks' cost per step is
# (hooks − no-hooks) / steps. Usage: scripts/measure_hook_cost.sh [ROUNDS] [STEPS] [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
rounds="${1:-5}" steps="${2:-2000}" workers="${3:-4}"
py="$OOMSCOPE_TORCH_VENV/bin/python"
collector="${COLLECTOR:-$CARGO_TARGET_DIR/release/collector}"
prog=(collector/tests/torch_programs/fast_loop.py --steps "$steps" --workers "$workers")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpu() { # CPU seconds and wall seconds of a command's whole tree (children waited for)
    /usr/bin/time -f '%U %S %e' -o "$out/time" "$@" >/dev/null 2>"$out/err" || {
        cat "$out/err" >&2
        exit 1
    }
    awk '{printf "%.2f %.2f\n", $1 + $2, $3}' "$out/time"
}
declare -A all
for r in $(seq "$rounds"); do
    for how in plain no-hooks hooks hooks-datagrams; do
        case $how in
        plain) t=$(OMP_NUM_THREADS=1 cpu "$py" "${prog[@]}") ;;
        no-hooks) t=$(OMP_NUM_THREADS=1 cpu "$collector" run -q --no-python-hooks -o "$out/t.oomt" -- "$py" "${prog[@]}") ;;
        hooks) t=$(OMP_NUM_THREADS=1 cpu "$collector" run -q -o "$out/t.oomt" -- "$py" "${prog[@]}") ;;
        hooks-datagrams) t=$(OMP_NUM_THREADS=1 OOMSCOPE_RING=0 cpu "$collector" run -q -o "$out/t.oomt" -- "$py" "${prog[@]}") ;;
        esac
        echo "round $r $how: cpu ${t% *} s, wall ${t#* } s"
        all[$how]+="${t% *} "
    done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p=$(median "${all[plain]}") n=$(median "${all[no-hooks]}") h=$(median "${all[hooks]}")
d=$(median "${all[hooks-datagrams]}")
echo "median cpu s: plain $p, no-hooks $n, hooks $h, hooks with datagrams $d"
awk -v p="$p" -v n="$n" -v h="$h" -v d="$d" -v s="$steps" 'BEGIN {
    printf "recording: %.3f ms/step; hooks: %.3f ms/step (with datagrams %.3f); both: %.3f ms/step (%d steps)\n",
        (n - p) * 1000 / s, (h - n) * 1000 / s, (d - n) * 1000 / s, (h - p) * 1000 / s, s }'
