# shellcheck shell=bash disable=SC2034  # sourced: the variables it sets are read by the launch scripts
# Shared shell functions for the launch scripts (sourced, never run). Bash 4+.
#
# Every command that changes something goes through qc_run / qc_start, which in dry-run mode (QC_DRY_RUN=1)
# print the command, with its environment and GPUs, instead of running it.

# The servers this script starts are reached directly, never through a cluster's HTTP(S)_PROXY (httpx, which the
# health waits and the reward use, honours it for every host NO_PROXY does not list): loopback and this node.
NO_PROXY="${NO_PROXY:-${no_proxy:-}}"
NO_PROXY="${NO_PROXY:+$NO_PROXY,}localhost,127.0.0.1,::1,$(hostname -s 2>/dev/null || hostname)"
no_proxy=$NO_PROXY
export NO_PROXY no_proxy

# qc_log MESSAGE: a timestamped line on stderr (the Slurm log) and in RUN_DIR/chain.log when known.
qc_log() {
  local line
  line="[$(date '+%F %T')] [quotecite ${QC_JOB_ID:-?}] $*"
  echo "$line" >&2
  if [[ ${QC_DRY_RUN:-0} != 1 && -n ${QC_RUN_DIR:-} && -d ${QC_RUN_DIR} ]]; then
    echo "$line" >>"$QC_RUN_DIR/chain.log"
  fi
}

# qc_die MESSAGE [LOGFILE...]: log an error with the last lines of each log, exit 1.
qc_die() {
  local msg=$1 f
  shift
  qc_log "error: $msg"
  for f in "$@"; do
    if [[ -f $f ]]; then
      echo "---- last 40 lines of $f" >&2
      tail -n 40 "$f" >&2
      echo "----" >&2
    fi
  done
  exit 1
}

# qc_software: locate (installing on first use, slurm/env.sh) the GPU software unless QUOTECITE_ENV_SETUP=0, and
# set QC_DEFAULT_SERVE, the `vllm serve` that runs the judge and embedder servers. env.sh declares nothing with
# `declare`, so what it sets stays global when sourced here.
qc_software() {
  if [[ ${QUOTECITE_ENV_SETUP:-1} == 1 ]]; then
    # shellcheck source=env.sh
    source "$QC_REPO/slurm/env.sh"
    [[ $QC_DRY_RUN == 1 ]] && echo "# software (slurm/env.sh)"
    qc_env_setup
    QC_DEFAULT_SERVE="$QC_SERVER_VLLM serve"
  else
    QC_DEFAULT_SERVE="vllm serve"
  fi
}

# qc_pick_python [FALLBACK]: set QC_PY, the python for launch/runlog.py (standard library + PyYAML):
# QUOTECITE_PYTHON, else the project's .venv, else FALLBACK when it is executable, else python3 on PATH.
qc_pick_python() {
  if [[ -n ${QUOTECITE_PYTHON:-} ]]; then
    QC_PY=$QUOTECITE_PYTHON
  elif [[ -x $QC_REPO/.venv/bin/python ]]; then
    QC_PY=$QC_REPO/.venv/bin/python
  elif [[ -n ${1:-} && -x $1 ]]; then
    QC_PY=$1
  else
    QC_PY=python3
  fi
}

# qc_quote ARGS...: the arguments as one shell-quoted command line.
qc_quote() {
  local out="" a
  for a in "$@"; do
    out+="${out:+ }$(printf '%q' "$a")"
  done
  printf '%s' "$out"
}

# qc_words ARRAY TEXT: TEXT split into words as the shell splits a command line (quotes group words, nothing is
# expanded: no globbing, no variables, no $(...)), into the array named ARRAY. A flag setting such as
# QUOTECITE_EVAL_SCORE_ARGS="--label 'my run' --limit 5" becomes four words, and '*' stays '*'.
qc_words() {
  local -n qc_words_out=$1
  local w
  qc_words_out=()
  while IFS= read -r -d '' w; do qc_words_out+=("$w"); done < <("${QC_PY:-python3}" -c '
import shlex, sys
sys.stdout.write("".join(w + "\0" for w in shlex.split(sys.argv[1])))' "$2")
}

# qc_run ARGS...: run a command, or print it in dry-run mode.
qc_run() {
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    echo "+ $(qc_quote "$@")"
    return 0
  fi
  "$@"
}

# qc_gpu_split N_TRAINER N_SERVER: set QC_TRAINER_GPUS and QC_SERVER_GPUS (comma lists) from the GPUs this job
# was given: Slurm's CUDA_VISIBLE_DEVICES when it sets one (clusters without device cgroups hand out e.g.
# "4,5,6"), else 0..N-1. The trainer takes the first N_TRAINER, the servers the next N_SERVER.
qc_gpu_split() {
  local n_train=$1 n_serve=$2 all=() i
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=',' read -r -a all <<<"$CUDA_VISIBLE_DEVICES"
  else
    for ((i = 0; i < n_train + n_serve; i++)); do all+=("$i"); done
  fi
  if ((${#all[@]} < n_train + n_serve)); then
    echo "error: this job sees ${#all[@]} GPU(s) (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}), needs $((n_train + n_serve)): $n_train for the trainer, $n_serve for the judge and embedder" >&2
    return 1
  fi
  QC_TRAINER_GPUS=$(IFS=,; echo "${all[*]:0:n_train}")
  QC_SERVER_GPUS=$(IFS=,; echo "${all[*]:n_train:n_serve}")
}

# qc_free_port PREFERRED: PREFERRED if it is free on 127.0.0.1, else a free port from the kernel.
qc_free_port() {
  "${QC_PY:-python3}" - "$1" <<'EOF'
import socket, sys
want = int(sys.argv[1])
for port in (want, 0):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        print(s.getsockname()[1])
        break
    except OSError:
        continue
    finally:
        s.close()
EOF
}

# qc_start NAME LOG GPUS -- CMD...: start CMD in the background in its own process group with
# CUDA_VISIBLE_DEVICES=GPUS (GPUS "-": without CUDA_VISIBLE_DEVICES, for an srun step that gets its node's own),
# stdout+stderr to LOG; sets QC_PID_<NAME>. Dry run: prints it.
qc_start() {
  local name=$1 log=$2 gpus=$3 pre=(env "CUDA_VISIBLE_DEVICES=$3") shown="CUDA_VISIBLE_DEVICES=$3 "
  shift 4
  [[ $gpus == - ]] && pre=(env -u CUDA_VISIBLE_DEVICES) shown=""
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    echo "+ $shown$(qc_quote "$@") > $log 2>&1 &   # $name"
    printf -v "QC_PID_$name" '%s' 0
    return 0
  fi
  # setsid: one process group per program, so stopping it also stops what it spawned (Ray, vLLM workers).
  setsid "${pre[@]}" "$@" >>"$log" 2>&1 </dev/null &
  printf -v "QC_PID_$name" '%s' "$!"
  qc_log "started $name (pid $!${shown:+, ${shown% }}): $(qc_quote "$@")"
}

# qc_wait_health LABEL URL PID LOG TIMEOUT: wait until URL answers 200 (launch/serving.py: the reward's own wait, the one
# the training job uses). Fails (return 1, message in QC_HEALTH_ERROR) when the process exits or TIMEOUT seconds pass;
# the message names the server and its log.
qc_wait_health() {
  local label=$1 url=$2 pid=$3 log=$4 timeout=$5 out
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    echo "+ wait until $url answers 200 (at most ${timeout}s), else stop: $label is not healthy, see $log"
    return 0
  fi
  if out=$(cd "$QC_REPO" && "${QC_PY:-python3}" -m launch.serving wait-health "$url" --pid "$pid" --timeout "$timeout" \
    --poll "${QUOTECITE_HEALTH_POLL:-2}" --label "$label" --log "$log" 2>>"$log"); then
    qc_log "$out"
    return 0
  fi
  QC_HEALTH_ERROR=${out:-$label is not healthy; see its log: $log}
  return 1
}

# qc_stop PID LABEL [GRACE]: TERM the process group of PID, KILL it after GRACE seconds (default 30).
qc_stop() {
  local pid=$1 label=$2 grace=${3:-30} t
  [[ ${QC_DRY_RUN:-0} == 1 || -z $pid || $pid == 0 ]] && return 0
  kill -0 "$pid" 2>/dev/null || return 0
  qc_log "stopping $label (pid $pid)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  for ((t = 0; t < grace * 2; t++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  qc_log "$label did not stop within ${grace}s; killing it"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
}

# qc_sbatch_clean ARGS...: sbatch without this job's SLURM_* variables (they would leak into the next job,
# e.g. a stale SLURM_RESTART_COUNT) or its GPU list; prints the new job id.
qc_sbatch_clean() {
  local unset_args=() v
  for v in $(compgen -e); do
    [[ $v == SLURM_* ]] && unset_args+=(-u "$v")
  done
  # Slurm sets (or not) the next job's GPUs itself; never hand it this job's.
  for v in CUDA_VISIBLE_DEVICES GPU_DEVICE_ORDINAL ROCR_VISIBLE_DEVICES; do
    [[ -v $v ]] && unset_args+=(-u "$v")
  done
  env "${unset_args[@]}" sbatch --parsable "$@"
}

# qc_submit_chain ARRAY_WHAT FINAL_WHAT BUILD_FINAL: submit the array job QC_ARRAY_SBATCH, then the job that
# `BUILD_FINAL ARRAY_JOB_ID` puts in QC_FINAL_SBATCH (it depends on the array); sets QC_ARRAY_JOB and QC_FINAL_JOB.
# The data-prep and evaluation arrays are both submitted this way.
qc_submit_chain() {
  QC_ARRAY_JOB=$(qc_sbatch_clean "${QC_ARRAY_SBATCH[@]}") || qc_die "sbatch of the $1 failed"
  QC_ARRAY_JOB=${QC_ARRAY_JOB%%;*}
  "$3" "$QC_ARRAY_JOB"
  QC_FINAL_JOB=$(qc_sbatch_clean "${QC_FINAL_SBATCH[@]}") ||
    qc_die "sbatch of the $2 failed ($1 $QC_ARRAY_JOB was submitted; scancel it or submit the $2)"
  QC_FINAL_JOB=${QC_FINAL_JOB%%;*}
}

# qc_servers_plan: ports, URLs and command lines of the servers: the judge (one or several replicas: QC_SERVERS names
# them judge, judge2, ...) and the embedder, from QC_JUDGE_CMD / QC_EMBED_CMD (arrays: the program, e.g. "vllm serve")
# and the QUOTECITE_* settings. Sets QC_JUDGE_URL (comma-separated when there are replicas: the reward spreads its
# requests over them), QC_EMBED_URL, per server QC_SRV_PORT_<name>, QC_SRV_HOST_<name>, QC_SRV_LABEL_<name>, and, as
# before, QC_JUDGE_PORT/QC_EMBED_PORT, QC_JUDGE_LABEL/QC_EMBED_LABEL, QC_JUDGE_ARGV/QC_EMBED_ARGV (the first judge's).
# Where they run comes from launch/layout.py (QC_SERVERS, QC_SRV_NODE_<name>, QC_SRV_POS_<name>, QC_SRV_DEV_<name>,
# QC_MULTI_NODE); without it (eval_8b.sh): judge and embedder on this node's QC_SERVER_GPUS, as always. On one node the
# servers listen on 127.0.0.1; on several they listen on, and are reached by, their node's name.
qc_servers_plan() {
  local defaults
  # the defaults live in launch/settings.py (the one table of settings)
  defaults=$(cd "$QC_REPO" && "${QC_PY:-python3}" -m launch.settings shell QUOTECITE_JUDGE_MODEL QUOTECITE_EMBED_MODEL \
    QUOTECITE_HEALTH_TIMEOUT QUOTECITE_JUDGE_PORT QUOTECITE_EMBED_PORT) || qc_die "bad settings (see above)"
  eval "$defaults"
  QC_JUDGE_MODEL=$QUOTECITE_JUDGE_MODEL
  QC_EMBED_MODEL=$QUOTECITE_EMBED_MODEL
  QC_HEALTH_TIMEOUT=$QUOTECITE_HEALTH_TIMEOUT
  [[ -n ${QC_SERVERS[*]:-} ]] || QC_SERVERS=(judge embed)
  local name want port taken=" " host node where i=0 judge_urls=()
  for name in "${QC_SERVERS[@]}"; do
    case $name in
      judge) want=$QUOTECITE_JUDGE_PORT ;;
      embed) want=$QUOTECITE_EMBED_PORT ;;
      *) want=$((QUOTECITE_JUDGE_PORT > 0 ? QUOTECITE_JUDGE_PORT + ${name#judge} : 0)) ;;
    esac
    port=$(qc_free_port "$want")
    while [[ $taken == *" $port "* ]]; do port=$(qc_free_port 0); done
    taken+="$port "
    node=$(qc_srv_var NODE "$name")
    if [[ ${QC_MULTI_NODE:-0} == 1 ]]; then
      host=$node where="$node GPU $(qc_srv_var POS "$name")"
    else
      host=127.0.0.1 where="GPU $(qc_srv_var DEV "$name")"
    fi
    printf -v "QC_SRV_PORT_$name" '%s' "$port"
    printf -v "QC_SRV_HOST_$name" '%s' "$host"
    if [[ $name == embed ]]; then
      QC_EMBED_PORT=$port
      QC_EMBED_URL=http://$host:$port/v1
      QC_EMBED_LABEL="embedding server ($QC_EMBED_MODEL on $where, port $port)"
      printf -v "QC_SRV_LABEL_$name" '%s' "$QC_EMBED_LABEL"
    else
      i=$((i + 1))
      judge_urls+=("http://$host:$port/v1")
      printf -v "QC_SRV_LABEL_$name" '%s' "judge server$( ((i > 1)) && echo " $i") ($QC_JUDGE_MODEL on $where, port $port)"
      if [[ $name == judge ]]; then
        QC_JUDGE_PORT=$port
        QC_JUDGE_LABEL=$QC_SRV_LABEL_judge
      fi
    fi
  done
  QC_JUDGE_URL=$(IFS=,; echo "${judge_urls[*]}")
  qc_server_argv judge
  QC_JUDGE_ARGV=("${QC_SRV_ARGV[@]}")
  qc_server_argv embed
  QC_EMBED_ARGV=("${QC_SRV_ARGV[@]}")
}

# qc_srv_var NODE|POS|DEV NAME: where server NAME runs (launch/layout.py's QC_SRV_<WHAT>_<name>); without a layout:
# this node, and QC_SERVER_GPUS.
qc_srv_var() {
  local v=QC_SRV_$1_$2
  if [[ -n ${!v:-} ]]; then
    echo "${!v}"
  elif [[ $1 == NODE ]]; then
    echo ""
  else
    echo "${QC_SERVER_GPUS:-}"
  fi
}

# qc_server_argv NAME: QC_SRV_ARGV, the command line of server NAME (judge, judge2, ..., embed), from launch/serving.py
# (the one definition the training job uses too): the program QC_JUDGE_CMD / QC_EMBED_CMD, then the model and flags.
qc_server_argv() {
  local name=$1 portv=QC_SRV_PORT_$1 hostv=QC_SRV_HOST_$1 role=judge cmd
  [[ $name == embed ]] && role=embed
  if [[ $role == embed ]]; then cmd=$(qc_quote "${QC_EMBED_CMD[@]}"); else cmd=$(qc_quote "${QC_JUDGE_CMD[@]}"); fi
  mapfile -t QC_SRV_ARGV < <(cd "$QC_REPO" && "${QC_PY:-python3}" -m launch.serving argv "$role" --host "${!hostv}" \
    --port "${!portv}" --cmd "$cmd")
  ((${#QC_SRV_ARGV[@]})) || qc_die "cannot build the $name server's command line (python -m launch.serving argv)"
}

# qc_on_node NAME LOG NODE POSITIONS DEVICES -- CMD...: qc_start CMD on this node with CUDA_VISIBLE_DEVICES=DEVICES
# when NODE is empty or this job's first node (where the batch script runs), else as an srun step on NODE (one
# task, sharing the allocation with the other steps: --overlap) through launch/layout.py run, which gives it that
# node's GPUs at POSITIONS and cleans up its process group. The step's srun is QC_PID_<NAME>: its exit is the
# program's exit on that node.
qc_on_node() {
  local name=$1 log=$2 node=$3 pos=$4 dev=$5
  shift 6
  if [[ -z $node || $node == "${QC_LAYOUT_NODES[0]:-}" ]]; then
    qc_start "$name" "$log" "$dev" -- "$@"
  else
    qc_start "$name" "$log" - -- srun --nodes=1 --ntasks=1 -w "$node" --overlap --kill-on-bad-exit=1 \
      --job-name="$name" "$QC_PY" "$QC_REPO/launch/layout.py" run --gpus "$pos" --grace 5 -- "$@"
  fi
}

# qc_serve NAME LOGDIR: start server NAME (judge, judge2, ..., embed) on its GPU (log LOGDIR/<name>.log) and wait for
# its /health. Returns 1 with QC_HEALTH_ERROR set (naming the server and its log) when it does not come up.
qc_serve() {
  local name=$1 logdir=$2 labelv=QC_SRV_LABEL_$1 portv=QC_SRV_PORT_$1 hostv=QC_SRV_HOST_$1 pidvar=QC_PID_$1
  qc_server_argv "$name"
  qc_on_node "$name" "$logdir/$name.log" "$(qc_srv_var NODE "$name")" "$(qc_srv_var POS "$name")" \
    "$(qc_srv_var DEV "$name")" -- "${QC_SRV_ARGV[@]}"
  qc_wait_health "${!labelv}" "http://${!hostv}:${!portv}/health" "${!pidvar}" "$logdir/$name.log" "$QC_HEALTH_TIMEOUT"
}

# qc_stop_servers [GRACE]: stop the embedder, then the judge replicas (any may not have started).
qc_stop_servers() {
  local i name pidv servers=(judge embed)
  [[ -n ${QC_SERVERS[*]:-} ]] && servers=("${QC_SERVERS[@]}")
  for ((i = ${#servers[@]} - 1; i >= 0; i--)); do
    name=${servers[i]}
    pidv=QC_PID_$name
    case $name in
      embed) qc_stop "${!pidv:-0}" "embedding server" "${1:-20}" ;;
      judge) qc_stop "${!pidv:-0}" "judge server" "${1:-20}" ;;
      *) qc_stop "${!pidv:-0}" "judge server ${name#judge}" "${1:-20}" ;;
    esac
  done
}
