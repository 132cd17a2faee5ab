# Sourced by the setup scripts: `log` prints a line under the script's name ($SETUP_NAME), and
# `timed WHAT CMD...` says what it installs, runs it, and says how long it took.
log() { printf '[%s] %s\n' "$SETUP_NAME" "$*" >&2; }
timed() {
    local what=$1 started=$SECONDS
    shift
    log "installing $what"
    "$@"
    log "installed $what in $((SECONDS - started)) s"
}
# `has_pins VENV NAME==VERSION...`: true when the venv's Python has exactly those versions.
has_pins() {
    local venv=$1
    shift
    [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$@" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if all(version(p.split("==")[0]) == p.split("==")[1] for p in sys.argv[1:]) else 1)
PY
}
