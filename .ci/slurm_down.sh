#!/usr/bin/env bash
# Stop the single-node Slurm started by .ci/slurm_up.sh: cancel leftover jobs, stop slurmd, slurmctld, munged.
# Only daemons started from its config are stopped (a real cluster's config is never touched). Safe to call twice.
set -uo pipefail

CONF=${QUOTECITE_SLURM_CONF:-/etc/slurm/slurm.conf}
MARK="# written by quotecite .ci/slurm_up.sh"
export SLURM_CONF=$CONF

say() { echo "slurm_down: $*"; }

if [[ ! -f $CONF ]] || ! grep -qF "$MARK" "$CONF"; then
  say "$CONF was not written by .ci/slurm_up.sh; leaving Slurm alone"
  exit 0
fi

# stop_pidfile NAME PIDFILE: TERM the daemon named in PIDFILE, KILL it after 10 s.
stop_pidfile() {
  local name=$1 pidfile=$2 pid
  [[ -s $pidfile ]] || { say "$name not running (no $pidfile)"; return 0; }
  pid=$(<"$pidfile")
  if ! kill -0 "$pid" 2>/dev/null; then
    say "$name not running (stale $pidfile)"
    rm -f "$pidfile"
    return 0
  fi
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.5
  done
  say "$name did not stop in 10 s; killing it"
  kill -KILL "$pid" 2>/dev/null
  rm -f "$pidfile"
}

if command -v scancel >/dev/null && timeout 5 scontrol ping >/dev/null 2>&1; then
  jobs=$(squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')
  if [[ -n ${jobs// /} ]]; then
    say "cancelling leftover jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
  fi
fi
stop_pidfile slurmd /run/slurm/slurmd.pid
stop_pidfile slurmctld /run/slurm/slurmctld.pid
munge_pid=/run/munge/munged.pid
if [[ -s $munge_pid ]]; then
  stop_pidfile munged "$munge_pid"
else
  say "munged: no pid file; leaving it"
fi
say "done"
