#!/usr/bin/env bash
# Start a single-node Slurm on this host for the launch tests (.ci/run calls it; safe to call again).
#
# Debian's slurm-wlm + munge, as root and without systemd: munged, slurmctld -f CONF, slurmd -f CONF, then wait
# until the node is idle. The node advertises 3 GPUs as a count-only GRES (no device files) so that the launch
# script's own `#SBATCH --gpus-per-node=3` line is submitted unchanged; nothing here touches a real GPU.
# Accounting is off, so `sacct` does not work: use `scontrol show job`.
#
# Settings (environment):
#   QUOTECITE_SLURM_CONF   where the config is written (default /etc/slurm/slurm.conf, where the clients look)
#   QUOTECITE_SLURM_WAIT   seconds to wait for each daemon and for the node to be idle (default 60)
set -euo pipefail

CONF=${QUOTECITE_SLURM_CONF:-/etc/slurm/slurm.conf}
WAIT=${QUOTECITE_SLURM_WAIT:-60}
CONF_DIR=$(dirname "$CONF")
LOG_DIR=/var/log/slurm
MARK="# written by quotecite .ci/slurm_up.sh"
export SLURM_CONF=$CONF

say() { echo "slurm_up: $*"; }
die() {
  echo "slurm_up: error: $1" >&2
  shift
  for f in "$@"; do
    if [[ -f $f ]]; then
      echo "---- last lines of $f" >&2
      tail -n 30 "$f" >&2
    fi
  done
  exit 1
}
# wait_for SECONDS COMMAND...: true once COMMAND succeeds, false after SECONDS.
wait_for() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}
node_idle() { [[ $(sinfo -h -N -o '%t' 2>/dev/null | head -n 1) == idle* ]]; }

# 1. Already up (a previous call, or a real cluster on a developer machine): nothing to do.
if command -v sinfo >/dev/null && timeout 5 sinfo -h >/dev/null 2>&1 && node_idle; then
  say "Slurm already answers ($(sinfo -h -o '%P %D %t' | head -n 1)); nothing to do"
  exit 0
fi

# 2. Packages.
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null ||
  ! command -v sbatch >/dev/null; then
  [[ $(id -u) == 0 ]] || die "slurm-wlm/munge are missing and installing them needs root"
  say "installing slurm-wlm and munge with apt-get (once)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/tmp/slurm_up_apt.log 2>&1 || die "apt-get update failed" /tmp/slurm_up_apt.log
  apt-get install -y -q --no-install-recommends slurm-wlm munge >>/tmp/slurm_up_apt.log 2>&1 ||
    die "apt-get install slurm-wlm munge failed" /tmp/slurm_up_apt.log
else
  say "slurm-wlm and munge are installed ($(slurmctld -V))"
fi

# 3. munge: the key, then the daemon (as the munge user, which owns the key).
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  say "creating /etc/munge/munge.key"
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
if munge -n >/dev/null 2>&1; then
  say "munged already running"
else
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged || die "munged did not start" /var/log/munge/munged.log
  wait_for "$WAIT" munge -n || die "munge -n still fails after ${WAIT}s" /var/log/munge/munged.log
fi

# 4. The config: one node (this host), its CPUs and memory, 3 count-only GPUs; no accounting.
node=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /run/slurm
if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script; set QUOTECITE_SLURM_CONF to another path"
fi
say "writing $CONF (node $node, $cpus CPUs, ${mem_mb} MB, gres gpu:3)"
cat >"$CONF.tmp" <<EOF
$MARK
ClusterName=quotecite-ci
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
# Finished jobs stay visible to 'scontrol show job' for 15 minutes (there is no sacct).
MinJobAge=900
# A job gets this long between SIGTERM and SIGKILL (the real clusters' default is 30 s).
KillWait=15
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$node CPUs=$cpus RealMemory=$mem_mb Gres=gpu:3 State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
mv "$CONF.tmp" "$CONF"
# gres/gpu needs a device file per GPU; plain files stand in for them (nothing opens them).
mkdir -p /var/lib/quotecite-ci
touch /var/lib/quotecite-ci/fakegpu0 /var/lib/quotecite-ci/fakegpu1 /var/lib/quotecite-ci/fakegpu2
cat >"$CONF_DIR/gres.conf.tmp" <<EOF
$MARK
NodeName=$node Name=gpu File=/var/lib/quotecite-ci/fakegpu[0-2]
EOF
mv "$CONF_DIR/gres.conf.tmp" "$CONF_DIR/gres.conf"

# 5. The daemons (each daemonizes itself). A stale daemon from an earlier call is reused.
if pgrep -x slurmctld >/dev/null; then
  say "slurmctld already running; asking it to re-read $CONF"
  scontrol reconfigure >/dev/null 2>&1 || true
else
  say "starting slurmctld -f $CONF"
  slurmctld -f "$CONF" || die "slurmctld did not start" "$LOG_DIR/slurmctld.log"
fi
wait_for "$WAIT" scontrol ping || die "slurmctld does not answer 'scontrol ping' after ${WAIT}s" "$LOG_DIR/slurmctld.log"
if pgrep -x slurmd >/dev/null; then
  say "slurmd already running"
else
  say "starting slurmd -f $CONF"
  slurmd -f "$CONF" || die "slurmd did not start" "$LOG_DIR/slurmd.log"
fi

# 6. The node: idle. A state left by an earlier run (down, drain, inval) is resumed once it has registered.
deadline=$((SECONDS + WAIT))
resumed=0
until node_idle; do
  state=$(sinfo -h -N -o '%t' 2>/dev/null | head -n 1)
  if ((resumed == 0)) && [[ $state == down* || $state == drain* || $state == inval* ]]; then
    say "node is $state; resuming it"
    scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 && resumed=1
  fi
  if ((SECONDS >= deadline)); then
    die "node $node is not idle after ${WAIT}s (state: $(sinfo -h -N -o '%t %E' 2>&1 | head -n 1))" \
      "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log"
  fi
  sleep 0.5
done
say "ready: $(sinfo -h -o 'partition %P, %D node(s), %t, %c CPUs, gres %G' | head -n 1)"
