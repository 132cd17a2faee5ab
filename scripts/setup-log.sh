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
