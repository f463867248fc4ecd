#!/usr/bin/env bash
# Stop the local Slurm started by .ci/slurm_up.sh: cancel leftover jobs, stop every slurmd (one per node of the
# layout), slurmctld, munged, and drop the node names it added to /etc/hosts. Only daemons started from its config
# are stopped (a real cluster's config is never touched). Safe to call twice.
set -uo pipefail

CONF=${QUOTECITE_SLURM_CONF:-/etc/slurm/slurm.conf}
MARK="# written by quotecite .ci/slurm_up.sh"
HOSTS_MARK="# quotecite .ci/slurm_up.sh nodes"
RUN_DIR=/run/slurm
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
# One slurmd per node (slurmd-NODE.pid), and the single slurmd of earlier versions (slurmd.pid).
for pidfile in "$RUN_DIR"/slurmd-*.pid "$RUN_DIR"/slurmd.pid; do
  [[ -e $pidfile ]] && stop_pidfile "slurmd ($(basename "$pidfile" .pid))" "$pidfile"
done
stop_pidfile slurmctld "$RUN_DIR/slurmctld.pid"
munge_pid=/run/munge/munged.pid
if [[ -s $munge_pid ]]; then
  stop_pidfile munged "$munge_pid"
else
  say "munged: no pid file; leaving it"
fi
if [[ -w /etc/hosts ]] && grep -qF "$HOSTS_MARK" /etc/hosts; then
  say "removing the node names from /etc/hosts"
  # In place (not a rename): /etc/hosts may be a bind mount.
  hosts=$(grep -vF "$HOSTS_MARK" /etc/hosts)
  printf '%s\n' "$hosts" >/etc/hosts
fi
say "done"
