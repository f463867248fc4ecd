#!/usr/bin/env bash
# Start a local Slurm on this host for the launch tests (.ci/run calls it; safe to call again).
#
# Debian's slurm-wlm + munge, as root and without systemd: munged, slurmctld -f CONF, one slurmd per node, then
# wait until every node is idle. Nodes advertise GPUs as a count-only GRES (plain files stand in for the device
# files; nothing here touches a real GPU), so the launch scripts' own `#SBATCH --gpus-per-node=...` lines are
# submitted unchanged. Accounting is off, so `sacct` does not work: use `scontrol show job`.
#
# Layouts (QUOTECITE_SLURM_LAYOUT):
#   single   one node, this host:       partition `ci` (the default partition), node $(hostname -s), gres gpu:3
#   multi    (default) `ci` as above, and also
#              partition `ci3`: 3 nodes ci3n[1-3] with gres gpu:1 each  (e.g. `sbatch -p ci3 --nodes=3`)
#              partition `ci8`: 2 nodes ci8n[1-2] with gres gpu:8 each  (e.g. `sbatch -p ci8 --nodes=2`)
#            The extra nodes are extra slurmd daemons on this same host (`slurmd -N NAME`; Debian's build has
#            multiple-slurmd support), each with its own port (NodeHostname = this host, NodeAddr = 127.0.0.1), so
#            all traffic stays on loopback. Their names are added to /etc/hosts (127.0.0.1) so a job can reach a
#            server on another node by its node name, as on a real cluster. Every node reports this host's CPUs and
#            memory: they overlap, Slurm does not know.
#            With several slurmd on one host, `scontrol listpids JOB` needs the node name for jobs outside `ci`:
#            `scontrol listpids JOB ci3n2`.
#
# Settings (environment):
#   QUOTECITE_SLURM_CONF     where the config is written (default /etc/slurm/slurm.conf, where the clients look)
#   QUOTECITE_SLURM_WAIT     seconds to wait for each daemon and for the nodes to be idle (default 60)
#   QUOTECITE_SLURM_LAYOUT   single | multi (default multi)
#
# Calling it again with a different layout rewrites the config and restarts the daemons (running jobs survive a
# daemon restart); with the same layout and every node idle it does nothing.
set -euo pipefail

CONF=${QUOTECITE_SLURM_CONF:-/etc/slurm/slurm.conf}
WAIT=${QUOTECITE_SLURM_WAIT:-60}
LAYOUT=${QUOTECITE_SLURM_LAYOUT:-multi}
CONF_DIR=$(dirname "$CONF")
LOG_DIR=/var/log/slurm
RUN_DIR=/run/slurm
GPU_DIR=/var/lib/quotecite-ci
MARK="# written by quotecite .ci/slurm_up.sh"
HOSTS_MARK="# quotecite .ci/slurm_up.sh nodes"
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
# pid_alive PIDFILE: the daemon named in PIDFILE is running.
pid_alive() { [[ -s $1 ]] && kill -0 "$(<"$1")" 2>/dev/null; }
# stop_pidfile NAME PIDFILE: TERM the daemon named in PIDFILE, KILL it after 10 s.
stop_pidfile() {
  local name=$1 pidfile=$2 pid
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid=$(<"$pidfile")
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

case $LAYOUT in
  single | multi) ;;
  *) die "QUOTECITE_SLURM_LAYOUT must be 'single' or 'multi', not '$LAYOUT'" ;;
esac

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
# The nodes: NAME PORT GPUS PARTITION. The first is the single-node layout of earlier versions, unchanged.
NODES=("$host 6818 3 ci")
if [[ $LAYOUT == multi ]]; then
  NODES+=("ci3n1 6821 1 ci3" "ci3n2 6822 1 ci3" "ci3n3 6823 1 ci3" "ci8n1 6831 8 ci8" "ci8n2 6832 8 ci8")
fi
node_names() { for n in "${NODES[@]}"; do echo "${n%% *}"; done; }
# all_idle: every node of the layout is idle (or mixed/allocated: running someone's job is fine too).
all_idle() {
  local states
  states=$(sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  local name st
  for name in $(node_names); do
    st=$(awk -v n="$name" '$1 == n {print $2; exit}' <<<"$states")
    [[ $st == idle* || $st == mix* || $st == alloc* ]] || return 1
  done
}

# 1. A config not written here (a real cluster on a developer machine) that answers: nothing to do.
if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
  if command -v sinfo >/dev/null && timeout 5 sinfo -h >/dev/null 2>&1; then
    say "Slurm already answers with a config not written here ($(sinfo -h -o '%P %D %t' | head -n 1)); nothing to do"
    exit 0
  fi
  die "$CONF exists and was not written by this script; set QUOTECITE_SLURM_CONF to another path"
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

# 3. The config: the nodes above, each with this host's CPUs and memory and count-only GPUs; no accounting.
node_lines="" gres_lines="" part_lines=""
declare -A part_nodes=()
for n in "${NODES[@]}"; do
  read -r name port gpus part <<<"$n"
  node_lines+="NodeName=$name NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=$cpus RealMemory=$mem_mb"
  node_lines+=" Gres=gpu:$gpus State=UNKNOWN"$'\n'
  gres_lines+="NodeName=$name Name=gpu File=$GPU_DIR/$name-gpu[0-$((gpus - 1))]"$'\n'
  part_nodes[$part]+="${part_nodes[$part]:+,}$name"
done
for part in ci ci3 ci8; do
  [[ -n ${part_nodes[$part]:-} ]] || continue
  default=NO
  [[ $part == ci ]] && default=YES
  part_lines+="PartitionName=$part Nodes=${part_nodes[$part]} Default=$default MaxTime=INFINITE State=UP"$'\n'
done
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd "$RUN_DIR" "$GPU_DIR"
cat >"$CONF.tmp" <<EOF
$MARK
# layout: $LAYOUT
ClusterName=quotecite-ci
SlurmctldHost=$host
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
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
# %n: the node name, so several slurmd on this host keep apart.
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
${node_lines}${part_lines}
EOF
# gres/gpu needs a device file per GPU; plain files stand in for them (nothing opens them).
for n in "${NODES[@]}"; do
  read -r name port gpus part <<<"$n"
  for ((i = 0; i < gpus; i++)); do touch "$GPU_DIR/$name-gpu$i"; done
done
printf '%s\n%s' "$MARK" "$gres_lines" >"$CONF_DIR/gres.conf.tmp"

ctld_pid=$RUN_DIR/slurmctld.pid
changed=1
if [[ -f $CONF ]] && cmp -s "$CONF.tmp" "$CONF" && [[ -f $CONF_DIR/gres.conf ]] &&
  cmp -s "$CONF_DIR/gres.conf.tmp" "$CONF_DIR/gres.conf"; then
  changed=0
fi
if ((changed == 0)) && timeout 5 sinfo -h >/dev/null 2>&1 && all_idle; then
  rm -f "$CONF.tmp" "$CONF_DIR/gres.conf.tmp"
  say "Slurm already answers with this layout ($LAYOUT, $(sinfo -h -o '%P' | tr '\n' ' ')); nothing to do"
  exit 0
fi
if ((changed)); then
  say "writing $CONF (layout $LAYOUT: $(node_names | tr '\n' ' '); $cpus CPUs, ${mem_mb} MB each)"
  mv "$CONF.tmp" "$CONF"
  mv "$CONF_DIR/gres.conf.tmp" "$CONF_DIR/gres.conf"
else
  rm -f "$CONF.tmp" "$CONF_DIR/gres.conf.tmp"
fi

# 4. Node names resolve to loopback (a job reaches a server on another node by its node name).
if [[ $LAYOUT == multi ]]; then
  missing=()
  for name in $(node_names); do
    getent hosts "$name" >/dev/null 2>&1 || missing+=("$name")
  done
  if ((${#missing[@]})); then
    if [[ -w /etc/hosts ]]; then
      say "adding ${missing[*]} to /etc/hosts (127.0.0.1)"
      echo "127.0.0.1 ${missing[*]} $HOSTS_MARK" >>/etc/hosts
    else
      say "warning: cannot add ${missing[*]} to /etc/hosts; jobs must reach other nodes by 127.0.0.1"
    fi
  fi
fi

# 5. munge: the key, then the daemon (as the munge user, which owns the key).
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

# 6. The daemons (each daemonizes itself). A new config restarts them (the node set can only change with a
# restart); running jobs survive it. An slurmd of an earlier version of this script (pid file slurmd.pid) is
# replaced by one named after its node.
if ((changed)) && pid_alive "$ctld_pid"; then
  # A restarted slurmd must find its running job steps; a node set change moves their spool, so wait for an
  # empty queue first rather than lose someone's job.
  wait_for "$WAIT" bash -c '[[ -z $(squeue -h -t RUNNING,COMPLETING,CONFIGURING -o %i 2>/dev/null) ]]' ||
    die "jobs are running ($(squeue -h -o %i | tr '\n' ' ')); the config changed and the daemons must restart: \
wait for them or cancel them, then call again"
fi
if ((changed)); then
  stop_pidfile "slurmd (earlier layout)" "$RUN_DIR/slurmd.pid"
  for f in "$RUN_DIR"/slurmd-*.pid; do
    [[ -e $f ]] && stop_pidfile "slurmd $(basename "$f" .pid)" "$f"
  done
  stop_pidfile slurmctld "$ctld_pid"
fi
if pid_alive "$ctld_pid"; then
  say "slurmctld already running"
else
  say "starting slurmctld -f $CONF"
  slurmctld -f "$CONF" || die "slurmctld did not start" "$LOG_DIR/slurmctld.log"
fi
wait_for "$WAIT" scontrol ping || die "slurmctld does not answer 'scontrol ping' after ${WAIT}s" "$LOG_DIR/slurmctld.log"
for name in $(node_names); do
  mkdir -p "/var/spool/slurmd/$name"
  if pid_alive "$RUN_DIR/slurmd-$name.pid"; then
    continue
  fi
  say "starting slurmd -N $name"
  slurmd -N "$name" -f "$CONF" || die "slurmd -N $name did not start" "$LOG_DIR/slurmd-$name.log"
done

# 7. The nodes: idle. A state left by an earlier run (down, drain, inval) is resumed once registered.
deadline=$((SECONDS + WAIT))
declare -A resumed=()
until all_idle; do
  while read -r name st; do
    [[ -n $name && -z ${resumed[$name]:-} ]] || continue
    if [[ $st == down* || $st == drain* || $st == inval* ]] && node_names | grep -qx "$name"; then
      say "node $name is $st; resuming it"
      scontrol update NodeName="$name" State=RESUME >/dev/null 2>&1 && resumed[$name]=1
    fi
  done < <(sinfo -h -N -o '%N %t' 2>/dev/null)
  if ((SECONDS >= deadline)); then
    die "nodes are not all idle after ${WAIT}s: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')" \
      "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd-$host.log"
  fi
  sleep 0.5
done
say "ready: $(sinfo -h -o 'partition %P: %D node(s) %N, %t, gres %G' | tr '\n' ';')"
