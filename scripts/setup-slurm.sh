#!/usr/bin/env bash
# Installs real Slurm (slurmctld, slurmd, srun, sbatch) and munge from Debian's packages,
# idempotently, for the tests that run the collector under a real cluster
# (collector/tests/slurm.rs; the cluster itself is made and torn down by the test's helper,
# collector/tests/support/slurm.rs, with its own config, spool and logs under a temporary
# directory: nothing here is configured or started, and no systemd is needed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

SETUP_NAME=setup-slurm
source scripts/setup-log.sh

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null ||
    ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    timed "the package lists (apt-get update)" $SUDO apt-get update -qq
    timed "slurm-wlm and munge (Debian)" $SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
# (srun --version needs a configuration to read, which the tests make: the package's is named.)
log "ready: slurm $(dpkg-query -W -f '${Version}' slurm-client 2>/dev/null), $(munged --version 2>/dev/null | awk '{print $1}')"
