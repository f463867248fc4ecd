# shellcheck shell=bash disable=SC2034  # sourced: the variables it sets are read by the launch scripts
# Shared shell functions for the launch scripts (sourced, never run). Bash 4+.
#
# Every command that changes something goes through qc_run / qc_start, which in dry-run mode (QC_DRY_RUN=1)
# print the command, with its environment and GPUs, instead of running it.

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
# CUDA_VISIBLE_DEVICES=GPUS, stdout+stderr to LOG; sets QC_PID_<NAME>. Dry run: prints it.
qc_start() {
  local name=$1 log=$2 gpus=$3
  shift 4
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    echo "+ CUDA_VISIBLE_DEVICES=$gpus $(qc_quote "$@") > $log 2>&1 &   # $name"
    printf -v "QC_PID_$name" '%s' 0
    return 0
  fi
  # setsid: one process group per program, so stopping it also stops what it spawned (Ray, vLLM workers).
  CUDA_VISIBLE_DEVICES=$gpus setsid "$@" >>"$log" 2>&1 </dev/null &
  printf -v "QC_PID_$name" '%s' "$!"
  qc_log "started $name (pid $!, CUDA_VISIBLE_DEVICES=$gpus): $(qc_quote "$@")"
}

# qc_http_ok URL: true when URL answers HTTP 200 within 5 s.
qc_http_ok() {
  if command -v curl >/dev/null; then
    curl -fsS -o /dev/null --max-time 5 "$1" 2>/dev/null
  else
    "${QC_PY:-python3}" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$1" \
      >/dev/null 2>&1
  fi
}

# qc_wait_health LABEL URL PID LOG TIMEOUT: wait until URL answers 200. Fails (return 1, message in
# QC_HEALTH_ERROR) when the process exits or TIMEOUT seconds pass; the message names the server and its log.
qc_wait_health() {
  local label=$1 url=$2 pid=$3 log=$4 timeout=$5
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    echo "+ wait until $url answers 200 (at most ${timeout}s), else stop: $label is not healthy, see $log"
    return 0
  fi
  local deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    if qc_http_ok "$url"; then
      qc_log "$label is healthy ($url after $((SECONDS - deadline + timeout))s)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null
      QC_HEALTH_ERROR="$label exited (code $?) before answering $url; see its log: $log"
      return 1
    fi
    sleep "${QUOTECITE_HEALTH_POLL:-2}"
  done
  QC_HEALTH_ERROR="$label did not answer $url within ${timeout}s; see its log: $log"
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

# qc_servers_plan: ports, URLs and command lines of the judge and the embedder (QC_JUDGE_ARGV, QC_EMBED_ARGV),
# from QC_JUDGE_CMD / QC_EMBED_CMD (arrays: the program, e.g. "vllm serve") and the QUOTECITE_* settings.
qc_servers_plan() {
  QC_JUDGE_MODEL=${QUOTECITE_JUDGE_MODEL:-Qwen/Qwen3.5-9B}
  QC_EMBED_MODEL=${QUOTECITE_EMBED_MODEL:-Qwen/Qwen3-VL-Embedding-2B}
  QC_HEALTH_TIMEOUT=${QUOTECITE_HEALTH_TIMEOUT:-1800}
  QC_JUDGE_PORT=$(qc_free_port "${QUOTECITE_JUDGE_PORT:-8000}")
  QC_EMBED_PORT=$(qc_free_port "${QUOTECITE_EMBED_PORT:-8001}")
  [[ $QC_EMBED_PORT == "$QC_JUDGE_PORT" ]] && QC_EMBED_PORT=$(qc_free_port 0)
  QC_JUDGE_URL=http://127.0.0.1:$QC_JUDGE_PORT/v1
  QC_EMBED_URL=http://127.0.0.1:$QC_EMBED_PORT/v1
  QC_JUDGE_LABEL="judge server ($QC_JUDGE_MODEL on GPU $QC_SERVER_GPUS, port $QC_JUDGE_PORT)"
  QC_EMBED_LABEL="embedding server ($QC_EMBED_MODEL on GPU $QC_SERVER_GPUS, port $QC_EMBED_PORT)"
  # The judge sees up to recipe's max_crops (6) block crops per request; the embedder runs vLLM's pooling runner
  # (last-token hidden state, L2-normalised: the encoder's embedding). Extra flags split on spaces.
  # shellcheck disable=SC2206
  QC_JUDGE_ARGV=("${QC_JUDGE_CMD[@]}" "$QC_JUDGE_MODEL" --host 127.0.0.1 --port "$QC_JUDGE_PORT"
    --served-model-name "$QC_JUDGE_MODEL" --gpu-memory-utilization "${QUOTECITE_JUDGE_GPU_UTIL:-0.55}"
    --max-model-len "${QUOTECITE_JUDGE_MAX_MODEL_LEN:-32768}" --limit-mm-per-prompt '{"image": 8}'
    ${QUOTECITE_JUDGE_ARGS:-})
  # shellcheck disable=SC2206
  QC_EMBED_ARGV=("${QC_EMBED_CMD[@]}" "$QC_EMBED_MODEL" --host 127.0.0.1 --port "$QC_EMBED_PORT"
    --served-model-name "$QC_EMBED_MODEL" --runner pooling
    --gpu-memory-utilization "${QUOTECITE_EMBED_GPU_UTIL:-0.25}"
    --max-model-len "${QUOTECITE_EMBED_MAX_MODEL_LEN:-8192}" ${QUOTECITE_EMBED_ARGS:-})
}

# qc_serve judge|embed LOGDIR: start that server on QC_SERVER_GPUS (log LOGDIR/<name>.log) and wait for its
# /health. Returns 1 with QC_HEALTH_ERROR set (naming the server and its log) when it does not come up.
qc_serve() {
  local name=$1 logdir=$2 label port pidvar
  if [[ $name == judge ]]; then
    label=$QC_JUDGE_LABEL port=$QC_JUDGE_PORT
    qc_start judge "$logdir/judge.log" "$QC_SERVER_GPUS" -- "${QC_JUDGE_ARGV[@]}"
  else
    label=$QC_EMBED_LABEL port=$QC_EMBED_PORT
    qc_start embed "$logdir/embed.log" "$QC_SERVER_GPUS" -- "${QC_EMBED_ARGV[@]}"
  fi
  pidvar=QC_PID_$name
  qc_wait_health "$label" "http://127.0.0.1:$port/health" "${!pidvar}" "$logdir/$name.log" "$QC_HEALTH_TIMEOUT"
}

# qc_stop_servers [GRACE]: stop the embedder, then the judge (either may not have started).
qc_stop_servers() {
  qc_stop "${QC_PID_embed:-0}" "embedding server" "${1:-20}"
  qc_stop "${QC_PID_judge:-0}" "judge server" "${1:-20}"
}
