#!/usr/bin/env bash
#SBATCH --job-name=quotecite-grpo-8b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=3
#SBATCH --cpus-per-task=32
#SBATCH --time=08:00:00
#SBATCH --signal=B:USR1@3600
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --output=%x-%j.out
# --- help ---
# GRPO training of Qwen3-VL-8B with the quote-and-retrieve reward, as a chain of Slurm jobs on 3 GPUs each
# (one node), or on several nodes (below).
#
#   sbatch launch/grpo_8b.sh [key=value ...]      # from the repository root; extra args are EasyR1 overrides
#   sbatch --nodes=3 --gpus-per-node=1 launch/grpo_8b.sh   # several nodes: any allocation with enough GPUs
#   bash launch/grpo_8b.sh --dry-run [key=value ...]   # print every command and the GPU split; runs nothing
#   SLURM_JOB_NUM_NODES=3 SLURM_JOB_NODELIST='gpu[01-03]' SLURM_GPUS_ON_NODE=1 bash launch/grpo_8b.sh --dry-run
#
# One job: GPU 2 (the third GPU Slurm gives the job) serves the judge (vllm serve Qwen/Qwen3.5-9B) and then the
# quote embedder (vllm serve Qwen/Qwen3-VL-Embedding-2B, pooling runner), each with its share of the GPU's memory;
# the job waits for both /health answers (QUOTECITE_HEALTH_TIMEOUT) and stops with an error naming the server
# and its log otherwise. Then EasyR1 trains on GPUs 0-1 (CUDA_VISIBLE_DEVICES=0,1, trainer.n_gpus_per_node=2),
# resuming from the last complete checkpoint in RUN_DIR/checkpoints; the reward reaches the servers through
# QUOTECITE_JUDGE_URL / QUOTECITE_EMBED_URL / QUOTECITE_JUDGE_MODEL / QUOTECITE_EMBED_MODEL.
#
# Chaining (self-submission): Slurm sends SIGUSR1 to this script an hour before the wall time (--signal). The
# script then lets EasyR1 reach its next checkpoint (it has no signal handler of its own, so it is stopped
# right after checkpoint_tracker.json advances and that step's metrics are logged; QUOTECITE_TRAINER_STOP=signal
# instead forwards SIGUSR1 to a trainer that saves on it), stops the servers and submits the next job with
# --dependency=afterany:<this job>. Submitting at the end, not up front, keeps the meaning of Slurm's own
# commands: `scancel` ends the chain (no successor is waiting), `scontrol requeue` reruns this job, which resumes
# by itself (SIGTERM never submits). The chain ends when a checkpoint reaches max_steps, when
# QUOTECITE_MAX_STALLED_JOBS jobs in a row end without a new checkpoint (a message says so), or at once when a
# server never becomes healthy (no resubmission).
#
# Resume and metrics: see launch/runlog.py. Each start of the trainer is a segment RUN_DIR/segments/JOBID-N/
# (n counts requeues) holding its experiment_log.jsonl, the reward's counters, and the trainer and server logs;
# RUN_DIR/run_log.jsonl merges them with every step exactly once; RUN_DIR/manifest.json records the git commit,
# recipe sha256, EasyR1 commit, vLLM versions, models and every job. Slurm logs go to RUN_DIR/logs/ (append).
#
# Settings (environment; they are passed on to the next job of the chain):
#   QUOTECITE_RUN_DIR        run folder (default REPO/runs/qwen3vl_8b_grpo)
#   QUOTECITE_RECIPE         EasyR1 config (default recipes/qwen3vl_8b_grpo.yaml)
#   QUOTECITE_DATA_DIR       data folder the recipe reads (train.parquet, val.parquet, images/); QUOTECITE_CACHE_DIR
#                            defaults to DATA_DIR/cache. QUOTECITE_TRAIN_FILES / QUOTECITE_VAL_FILES override
#                            data.train_files / data.val_files.
#   QUOTECITE_MAX_STEPS      steps of the run (default: the recipe's trainer.max_steps, else EasyR1's formula on
#                            the training parquet); always passed to EasyR1 as trainer.max_steps
#   QUOTECITE_MAX_STALLED_JOBS  jobs in a row without progress before the chain stops (default 3)
#   QUOTECITE_JUDGE_MODEL, QUOTECITE_EMBED_MODEL, QUOTECITE_JUDGE_GPU_UTIL (0.55), QUOTECITE_EMBED_GPU_UTIL (0.25),
#   QUOTECITE_JUDGE_MAX_MODEL_LEN (32768), QUOTECITE_EMBED_MAX_MODEL_LEN (8192), QUOTECITE_JUDGE_ARGS,
#   QUOTECITE_EMBED_ARGS (extra vllm serve flags), QUOTECITE_JUDGE_PORT (8000), QUOTECITE_EMBED_PORT (8001)
#   QUOTECITE_HEALTH_TIMEOUT seconds each server may take to answer /health (default 1800)
#   QUOTECITE_TRAINER_STOP   checkpoint (default) | signal: how the trainer is stopped after SIGUSR1
#   QUOTECITE_STOP_GRACE     seconds from SIGUSR1 until the trainer is stopped regardless (default 3000; keep it
#                            below the --signal offset minus the time to stop and resubmit)
#   QUOTECITE_SBATCH_ARGS    extra sbatch options for the next jobs (e.g. "--partition=gpu --account=x")
#   QUOTECITE_CHAIN          1 (default): submit the next job; 0: never
#   QUOTECITE_ENV_SETUP      1 (default): install/use the GPU environments of slurm/env.sh; 0: use PATH
#   QUOTECITE_TRAINER_CMD, QUOTECITE_JUDGE_CMD, QUOTECITE_EMBED_CMD: the programs started (default
#                            "<trainer venv>/bin/python -m verl.trainer.main" and "<server venv>/bin/vllm serve";
#                            the tests put stand-ins here, everything else stays the same)
#   QUOTECITE_PYTHON         python for launch/runlog.py (default REPO/.venv/bin/python)
#   QUOTECITE_PREFLIGHT      1 (default): once both servers are healthy and before the trainer starts, run the reward's
#                            check (python -m reward check: every row's cache entry, page window, images and
#                            encoder, one judge and one embedding request) with the trainer's python, environment and
#                            overrides and no GPU; a failure ends the job with the check's message and no
#                            resubmission (as a server that never becomes healthy). 0: skip it.
#   QUOTECITE_CHECK_PYTHON   python for the check (default: the trainer's, where the reward runs)
#   QUOTECITE_MAX_RESTARTS   trainer restarts per job after a judge/embedder outage (default 3): the reward waits out
#                            an outage for judge_outage_s (recipe, default 600 s), then stops the trainer with one
#                            error and writes server_outage.json into the segment; the job then restarts both
#                            servers and the trainer in a new segment, resuming from the last complete checkpoint
#                            (the merged run log keeps every step once); beyond the limit the job ends as crashed
#   QUOTECITE_MAX_SERVER_RESTARTS  restarts per job of a judge or embedder process that dies while the trainer runs
#                            (default 5; the reward waits meanwhile); beyond it the job stops (server_failed).
#                            manifest.json counts every restart ("restarts": judge, embed, trainer)
#
# Several nodes: launch/layout.py splits the allocation, read from SLURM_JOB_NUM_NODES, SLURM_JOB_NODELIST (node names;
# the batch script runs on the first), SLURM_GPUS_ON_NODE (else SLURM_GPUS_PER_NODE; QUOTECITE_NODE_GPUS="8(x2),4"
# for uneven nodes) and CUDA_VISIBLE_DEVICES (the device ids of the batch node's GPUs). The servers take the last
# QUOTECITE_SERVE_GPUS GPUs of the allocation (default 1: the last GPU of the last node): judge replica i on the i-th,
# the embedder on the last; QUOTECITE_JUDGE_REPLICAS (default 1, at most QUOTECITE_SERVE_GPUS) judge servers, whose
# URLs QUOTECITE_JUDGE_URL lists comma-separated (the reward sends each request to the least busy replica and skips
# one that stops answering). The trainer takes QUOTECITE_TRAIN_GPUS_PER_NODE GPUs (default: 2 on one node; on several,
# every GPU the first node keeps) on each node that has that many left; a serving node with fewer left does not
# train (the plan lists its idle GPUs). With several trainer nodes the job starts a Ray cluster: the head on the
# first node (`ray start --head --block`), a worker on each other trainer node (`srun --nodes=1 --ntasks=1 -w NODE
# --overlap ... ray start --address HEAD:PORT --block`), waits until Ray sees every trainer node
# (QUOTECITE_RAY_TIMEOUT, default 300 s), and runs EasyR1 with RAY_ADDRESS=HEAD:PORT, trainer.nnodes and
# trainer.n_gpus_per_node. A Ray node whose step exits stops the trainer; the segment ends as crashed, naming the node
# and its log. One trainer node: no Ray cluster (EasyR1 starts its own, as on one node). Servers on another node run
# as srun steps there and listen on, and are reached by, their node's name. Programs started on another node run
# through `python launch/layout.py run --gpus POSITIONS` (that node's GPUs; what they leave behind is killed), so the
# repository and QUOTECITE_PYTHON must be on a shared file system.
#   QUOTECITE_SERVE_GPUS (1), QUOTECITE_JUDGE_REPLICAS (1), QUOTECITE_TRAIN_GPUS_PER_NODE, QUOTECITE_NODE_GPUS: above
#   QUOTECITE_RAY_CMD        the `ray` program (default: next to the trainer's python; QUOTECITE_ENV_SETUP=0: ray)
#   QUOTECITE_RAY_PORT       the head's GCS port (default 6379, or a free one); QUOTECITE_RAY_TMPDIR: Ray's --temp-dir
#   QUOTECITE_RAY_TIMEOUT    seconds for every trainer node to join the Ray cluster (default 300)
#   RAY_AUTH_MODE            passed to every Ray command and the trainer (default disabled, as the trainer always ran;
#                            token: put the token where every node finds it, e.g. ~/.ray/auth_token on a shared home)
# --- end help ---
set -uo pipefail

# ------------------------------------------------------------------------------------------------ arguments
QC_DRY_RUN=0
QC_ARGS=()
for a in "$@"; do
  case $a in
    --dry-run) QC_DRY_RUN=1 ;;
    -h | --help)
      awk '/^# --- end help ---$/ {exit} shown {sub(/^# ?/, ""); print} /^# --- help ---$/ {shown = 1}' "$0"
      exit 0
      ;;
    *) QC_ARGS+=("$a") ;;
  esac
done

# Under sbatch this file runs from a spool copy: find the repository before sourcing anything from it.
for QC_REPO in "${QUOTECITE_REPO:-}" "${SLURM_SUBMIT_DIR:-}" "$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)" \
  "$(scontrol show job "${SLURM_JOB_ID:-0}" 2>/dev/null | sed -n 's/^ *Command=\(.*\)\/launch\/[^/]*$/\1/p')"; do
  [[ -n $QC_REPO && -f $QC_REPO/slurm/common.sh ]] && break
done
if [[ ! -f ${QC_REPO:-}/slurm/common.sh ]]; then
  echo "error: cannot find the repository; run sbatch from its root or set QUOTECITE_REPO" >&2
  exit 1
fi
QC_REPO=$(cd "$QC_REPO" && pwd)
# shellcheck source=../slurm/common.sh
source "$QC_REPO/slurm/common.sh"
cd "$QC_REPO" || exit 1

# ------------------------------------------------------------------------------------------------ settings
QC_JOB_ID=${SLURM_JOB_ID:-local-$(date +%Y%m%d%H%M%S)}
QC_RUN_DIR=$(realpath -m "${QUOTECITE_RUN_DIR:-$QC_REPO/runs/qwen3vl_8b_grpo}")
QC_RECIPE=$(realpath -m "${QUOTECITE_RECIPE:-$QC_REPO/recipes/qwen3vl_8b_grpo.yaml}")
QC_MAX_STALLED=${QUOTECITE_MAX_STALLED_JOBS:-3}
QC_STOP_MODE=${QUOTECITE_TRAINER_STOP:-checkpoint}
QC_STOP_GRACE=${QUOTECITE_STOP_GRACE:-3000}
QC_POLL=${QUOTECITE_POLL_SECONDS:-5}
[[ $QC_STOP_MODE == checkpoint || $QC_STOP_MODE == signal ]] ||
  qc_die "QUOTECITE_TRAINER_STOP must be 'checkpoint' or 'signal', not '$QC_STOP_MODE'"

qc_software
if [[ ${QUOTECITE_ENV_SETUP:-1} == 1 ]]; then
  QC_DEFAULT_TRAINER="$QC_TRAINER_PY -m verl.trainer.main"
else
  QC_DEFAULT_TRAINER="python3 -m verl.trainer.main"
  QC_EASYR1_COMMIT_FULL=${QUOTECITE_EASYR1_COMMIT:-unknown (QUOTECITE_ENV_SETUP=0)}
  QC_VLLM_TRAINER_VERSION=unknown
  QC_VLLM_SERVER_VERSION=unknown
fi
qc_pick_python "${QC_TRAINER_PY:-}"
# The split of the allocation (launch/layout.py): trainer nodes and GPUs, serving GPUs, whether Ray is needed.
QC_LAYOUT=$("$QC_PY" "$QC_REPO/launch/layout.py" plan) || exit 1
eval "$QC_LAYOUT"
if [[ -n ${QUOTECITE_RAY_CMD:-} ]]; then
  read -r -a QC_RAY_CMD <<<"$QUOTECITE_RAY_CMD"
elif [[ ${QUOTECITE_ENV_SETUP:-1} == 1 ]]; then
  QC_RAY_CMD=("$(dirname "$QC_TRAINER_PY")/ray")
else
  QC_RAY_CMD=(ray)
fi
# The reward's pre-flight check runs where the reward will: the trainer's python (QC_DEFAULT_TRAINER's).
QC_CHECK_PY=${QUOTECITE_CHECK_PYTHON:-${QC_TRAINER_PY:-$QC_PY}}
[[ ${QUOTECITE_ENV_SETUP:-1} == 1 ]] || QC_CHECK_PY=${QUOTECITE_CHECK_PYTHON:-$QC_PY}
read -r -a QC_TRAINER_CMD <<<"${QUOTECITE_TRAINER_CMD:-$QC_DEFAULT_TRAINER}"
read -r -a QC_JUDGE_CMD <<<"${QUOTECITE_JUDGE_CMD:-$QC_DEFAULT_SERVE}"
read -r -a QC_EMBED_CMD <<<"${QUOTECITE_EMBED_CMD:-$QC_DEFAULT_SERVE}"

# The recipe reads ${oc.env:QUOTECITE_DATA_DIR} etc.; the cache defaults to the data folder's.
if [[ -n ${QUOTECITE_DATA_DIR:-} ]]; then
  export QUOTECITE_CACHE_DIR=${QUOTECITE_CACHE_DIR:-$QUOTECITE_DATA_DIR/cache}
fi
QC_TRAIN_FILES=${QUOTECITE_TRAIN_FILES:-${QUOTECITE_DATA_DIR:+$QUOTECITE_DATA_DIR/train.parquet}}

# max_steps, the recipe's chaining checks, the logger list (EasyR1's `file` logger must be on).
# Also the absolute paths of the recipe's format prompt and reward file, and the reward's batch shape (see
# `python -m launch.runlog plan`): they go last, after the extra arguments they were computed from.
QC_FORMAT_PROMPT_OVERRIDE='' QC_REWARD_FN_OVERRIDE='' QC_BATCH_GROUPS_OVERRIDE='' QC_KEEP_BAND_OVERRIDE=''
if ! QC_PLAN=$("$QC_PY" -m launch.runlog plan --recipe "$QC_RECIPE" --max-steps "${QUOTECITE_MAX_STEPS:-}" \
  --train-files "$QC_TRAIN_FILES" --repo "$QC_REPO" -- "${QC_ARGS[@]}"); then
  if [[ $QC_DRY_RUN == 1 ]]; then
    QC_PLAN=$("$QC_PY" -m launch.runlog plan --recipe "$QC_RECIPE" --max-steps 0 --repo "$QC_REPO" \
      -- "${QC_ARGS[@]}" 2>/dev/null) || QC_PLAN="QC_LOGGER_OVERRIDE='' QC_POLICY_MODEL='' QC_REQUIRE_LORA=1"
    QC_PLAN+=$'\n'"QC_MAX_STEPS='<from the data at run time>' QC_MAX_STEPS_FROM=''"
  else
    qc_die "cannot plan the run from $QC_RECIPE (see the error above)"
  fi
fi
eval "$QC_PLAN"

QC_OVERRIDES=(
  "config=$QC_RECIPE"
  "trainer.nnodes=$QC_NNODES"
  "trainer.n_gpus_per_node=$QC_N_TRAIN_GPUS"
  "trainer.save_checkpoint_path=$QC_RUN_DIR/checkpoints"
  "trainer.find_last_checkpoint=true"
  "trainer.max_steps=$QC_MAX_STEPS"
)
[[ -n $QC_LOGGER_OVERRIDE ]] && QC_OVERRIDES+=("$QC_LOGGER_OVERRIDE")
[[ -n ${QUOTECITE_TRAIN_FILES:-} ]] && QC_OVERRIDES+=("data.train_files=$QUOTECITE_TRAIN_FILES")
[[ -n ${QUOTECITE_VAL_FILES:-} ]] && QC_OVERRIDES+=("data.val_files=$QUOTECITE_VAL_FILES")
QC_OVERRIDES+=("${QC_ARGS[@]}")
for QC_O in "$QC_FORMAT_PROMPT_OVERRIDE" "$QC_REWARD_FN_OVERRIDE" "$QC_BATCH_GROUPS_OVERRIDE" "$QC_KEEP_BAND_OVERRIDE"; do
  [[ -n $QC_O ]] && QC_OVERRIDES+=("$QC_O")
done

# ------------------------------------------------------------------------------------------------ GPUs, ports
qc_servers_plan
QC_RAY_ADDRESS=""
if [[ $QC_RAY == 1 ]]; then
  QC_RAY_PORT=$(qc_free_port "${QUOTECITE_RAY_PORT:-6379}")
  QC_RAY_ADDRESS=${QC_TRAIN_ADDRS[0]}:$QC_RAY_PORT
  # Ray >= 2.5x turns token authentication on by itself for a cluster it cannot tell is local; the trainer has always
  # run with RAY_AUTH_MODE=disabled (see qc_trainer_env). Every Ray command here (srun passes the environment on)
  # uses the same mode: set RAY_AUTH_MODE=token, with the token where every node finds it, to have one.
  export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
fi

# qc_ray_start LOGDIR: the Ray head on this (the first) node, then, once its port answers, a worker on each other
# trainer node as an srun step (QC_PID_ray_0 = the head, QC_PID_ray_<i> = the step of node i); logs LOGDIR/ray-NODE.log.
qc_ray_start() {
  local logdir=$1 i node tmp=()
  QC_RAY_LOGDIR=$logdir
  [[ -n ${QUOTECITE_RAY_TMPDIR:-} ]] && tmp=(--temp-dir "$QUOTECITE_RAY_TMPDIR")
  # Through launch/layout.py run like the workers: Ray drains for 30 s on SIGTERM; the wrapper cuts that to 5 s and
  # kills what the head leaves behind.
  qc_start ray_0 "$logdir/ray-${QC_TRAIN_NODES[0]}.log" "$QC_TRAINER_GPUS" -- "$QC_PY" "$QC_REPO/launch/layout.py" \
    run --gpus "$QC_TRAIN_POSITIONS" --grace 5 -- "${QC_RAY_CMD[@]}" start --head --block \
    --node-ip-address "${QC_TRAIN_ADDRS[0]}" --port "$QC_RAY_PORT" --num-gpus "$QC_N_TRAIN_GPUS" \
    --include-dashboard=false --disable-usage-stats "${tmp[@]}"
  qc_ray_head_ready || return 1
  for ((i = 1; i < QC_NNODES; i++)); do
    node=${QC_TRAIN_NODES[i]}
    qc_on_node "ray_$i" "$logdir/ray-$node.log" "$node" "$QC_TRAIN_POSITIONS" "" -- \
      "${QC_RAY_CMD[@]}" start --address "$QC_RAY_ADDRESS" --block --node-ip-address "${QC_TRAIN_ADDRS[i]}" \
      --num-gpus "$QC_N_TRAIN_GPUS" --disable-usage-stats
  done
}

# qc_ray_head_ready: wait until the head answers `ray status` (a worker that joins earlier can be turned away).
qc_ray_head_ready() {
  [[ $QC_DRY_RUN == 1 ]] && { echo "+ wait until \`$(qc_quote "${QC_RAY_CMD[@]}" status --address "$QC_RAY_ADDRESS")\` answers"; return 0; }
  local deadline=$((SECONDS + ${QUOTECITE_RAY_TIMEOUT:-300}))
  until "${QC_RAY_CMD[@]}" status --address "$QC_RAY_ADDRESS" >/dev/null 2>&1; do
    qc_check_ray || return 1
    if ((SECONDS >= deadline)); then
      QC_RAY_ERROR="the Ray head on ${QC_TRAIN_NODES[0]} did not answer at $QC_RAY_ADDRESS within ${QUOTECITE_RAY_TIMEOUT:-300}s; see its log $QC_RAY_LOGDIR/ray-${QC_TRAIN_NODES[0]}.log"
      return 1
    fi
    sleep 1
  done
}

# qc_check_ray: every Ray node's process (the head, the workers' srun steps) still runs; else QC_RAY_ERROR, return 1.
qc_check_ray() {
  local i pidv rc
  [[ $QC_RAY == 1 && $QC_DRY_RUN == 0 ]] || return 0
  for ((i = 0; i < QC_NNODES; i++)); do
    pidv=QC_PID_ray_$i
    [[ -n ${!pidv:-} && ${!pidv} != 0 ]] || continue
    kill -0 "${!pidv}" 2>/dev/null && continue
    wait "${!pidv}" 2>/dev/null
    rc=$?
    QC_RAY_ERROR="Ray $( ((i == 0)) && echo head || echo "worker (srun step)") on ${QC_TRAIN_NODES[i]} exited (code $rc); see its log ${QC_RAY_LOGDIR:-}/ray-${QC_TRAIN_NODES[i]}.log"
    printf -v "$pidv" '%s' 0
    return 1
  done
}

# qc_ray_wait: wait until Ray sees every trainer node (`ray status`), while every Ray node's process lives.
qc_ray_wait() {
  if [[ $QC_DRY_RUN == 1 ]]; then
    echo "+ wait until \`$(qc_quote "${QC_RAY_CMD[@]}" status --address "$QC_RAY_ADDRESS")\` lists $QC_NNODES active nodes (at most ${QUOTECITE_RAY_TIMEOUT:-300}s)"
    return 0
  fi
  local deadline=$((SECONDS + ${QUOTECITE_RAY_TIMEOUT:-300})) seen=0
  while :; do
    qc_check_ray || return 1
    seen=$("${QC_RAY_CMD[@]}" status --address "$QC_RAY_ADDRESS" 2>/dev/null |
      awk '/^Active:/ {a = 1; next} /^[A-Z]/ {a = 0} a && /node_/ {n++} END {print n + 0}')
    if ((seen >= QC_NNODES)); then
      qc_log "Ray cluster at $QC_RAY_ADDRESS: $seen nodes (${QC_TRAIN_NODES[*]}), $QC_N_TRAIN_GPUS GPU(s) each"
      return 0
    fi
    if ((SECONDS >= deadline)); then
      QC_RAY_ERROR="Ray sees $seen of $QC_NNODES trainer nodes after ${QUOTECITE_RAY_TIMEOUT:-300}s; see the logs $QC_RAY_LOGDIR/ray-*.log"
      return 1
    fi
    sleep 1
  done
}

# qc_ray_stop [GRACE]: SIGTERM every Ray node at once (the head, the workers' srun steps: their launch/layout.py run
# wrappers kill what Ray leaves within 5 s), wait at most GRACE seconds (default 20), then SIGKILL what is left.
qc_ray_stop() {
  local i pidv pids=() t
  [[ $QC_RAY == 1 && $QC_DRY_RUN == 0 ]] || return 0
  for ((i = 0; i < QC_NNODES; i++)); do
    pidv=QC_PID_ray_$i
    [[ -n ${!pidv:-} && ${!pidv} != 0 ]] && pids+=("${!pidv}")
    printf -v "$pidv" '%s' 0
  done
  ((${#pids[@]})) || return 0
  qc_log "stopping the Ray cluster (${QC_TRAIN_NODES[*]})"
  for i in "${pids[@]}"; do kill -TERM -- "-$i" 2>/dev/null || kill -TERM "$i" 2>/dev/null; done
  for ((t = 0; t < ${1:-20} * 2; t++)); do
    for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null && break; done
    kill -0 "$i" 2>/dev/null || break
    sleep 0.5
  done
  for i in "${pids[@]}"; do kill -KILL -- "-$i" 2>/dev/null; done
  return 0
}

# The trainer's environment: the servers' URLs for the reward, the run's folders, the repository on the path
# (the reward plugin imports reward/, data_prep/ from Ray workers).
qc_trainer_env() {
  QC_TRAINER_ENV=(
    "QUOTECITE_JUDGE_URL=$QC_JUDGE_URL"
    "QUOTECITE_EMBED_URL=$QC_EMBED_URL"
    "QUOTECITE_JUDGE_MODEL=$QC_JUDGE_MODEL"
    "QUOTECITE_EMBED_MODEL=$QC_EMBED_MODEL"
    "QUOTECITE_CKPT_DIR=$QC_RUN_DIR/checkpoints"
    "QUOTECITE_METRICS_DIR=$1"
    "QUOTECITE_SEGMENT=$2"
    "PYTHONPATH=$QC_REPO${PYTHONPATH:+:$PYTHONPATH}"
    "RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}"
    "WANDB_MODE=${WANDB_MODE:-offline}"
    "WANDB_DIR=$QC_RUN_DIR"
  )
  # Several trainer nodes: EasyR1's ray.init() joins the job's cluster instead of starting its own.
  [[ -n $QC_RAY_ADDRESS ]] && QC_TRAINER_ENV+=("RAY_ADDRESS=$QC_RAY_ADDRESS")
}

# qc_preflight LOGDIR: the reward's check (python -m reward check) of the data, the cache and the live servers, run as
# the reward will run (the trainer's python, environment and overrides; no GPU, like EasyR1's reward actor), output
# in LOGDIR/check.log. Returns 1 with QC_CHECK_ERROR (the check's one line per problem kind) when anything is wrong.
qc_preflight() {
  local log=$1/check.log rc lines
  local argv=(env "${QC_TRAINER_ENV[@]}" CUDA_VISIBLE_DEVICES= "$QC_CHECK_PY" -m reward check --recipe "$QC_RECIPE"
    --judge-url "$QC_JUDGE_URL" --judge-model "$QC_JUDGE_MODEL" --embed-url "$QC_EMBED_URL" -- "${QC_OVERRIDES[@]:1}")
  if [[ $QC_DRY_RUN == 1 ]]; then
    echo "+ $(qc_quote "${argv[@]}") > $log 2>&1"
    return 0
  fi
  qc_log "reward check: the training data, the block cache and both servers (log: $log)"
  # In the background so that a signal (scancel, requeue, USR1) is handled while it runs, not after it ends.
  "${argv[@]}" >"$log" 2>&1 </dev/null &
  QC_PID_check=$!
  while :; do
    wait "$QC_PID_check"
    rc=$?
    kill -0 "$QC_PID_check" 2>/dev/null || break
  done
  ((rc > 128)) && { wait "$QC_PID_check" 2>/dev/null; rc=$?; }  # the wait was cut short by a trapped signal
  QC_PID_check=0
  if ((rc == 0)); then
    qc_log "reward check passed"
    return 0
  fi
  lines=$(sed -n 's/^reward check failed: //p' "$log" | paste -sd ';' -)
  lines=${lines//;/; }
  QC_CHECK_ERROR="reward check failed (exit $rc): ${lines:-see its log $log}"
  return 1
}

# qc_plan_lines: the split, as the dry run (and the job's first log lines) show it.
qc_plan_lines() {
  local name nodev posv
  if [[ $QC_MULTI_NODE == 0 ]]; then
    echo "# GPU split       trainer CUDA_VISIBLE_DEVICES=$QC_TRAINER_GPUS (trainer.n_gpus_per_node=$QC_N_TRAIN_GPUS); judge + embedder CUDA_VISIBLE_DEVICES=$QC_SERVER_GPUS"
    ((QC_JUDGE_REPLICAS > 1)) && echo "# judge replicas  $QC_JUDGE_REPLICAS"
    [[ -n $QC_IDLE ]] && echo "# idle GPUs       $QC_IDLE"
    return 0
  fi
  echo "# nodes           ${#QC_LAYOUT_NODES[@]}: ${QC_LAYOUT_NODES[*]} (GPUs per node: ${QC_LAYOUT_GPUS[*]}; $QC_LAYOUT_SOURCE)"
  echo "# trainer         $QC_NNODES node(s) x $QC_N_TRAIN_GPUS GPU(s): ${QC_TRAIN_NODES[*]}, GPU(s) $QC_TRAIN_POSITIONS on each (trainer.nnodes=$QC_NNODES trainer.n_gpus_per_node=$QC_N_TRAIN_GPUS)"
  if [[ $QC_RAY == 1 ]]; then
    echo "# Ray cluster     head on ${QC_TRAIN_NODES[0]} at $QC_RAY_ADDRESS, workers on ${QC_TRAIN_NODES[*]:1}; the trainer runs with RAY_ADDRESS=$QC_RAY_ADDRESS"
  else
    echo "# Ray cluster     none (one trainer node: EasyR1 starts its own)"
  fi
  local where=()
  for name in "${QC_SERVERS[@]}"; do
    nodev=QC_SRV_NODE_$name posv=QC_SRV_POS_$name
    where+=("$name on ${!nodev} GPU ${!posv} (port $(qc_srv_port "$name"))")
  done
  echo "# serving         $(IFS=';'; echo "${where[*]}" | sed 's/;/; /g')"
  [[ -n $QC_IDLE ]] && echo "# idle GPUs       $QC_IDLE (QUOTECITE_TRAIN_GPUS_PER_NODE, QUOTECITE_SERVE_GPUS, QUOTECITE_JUDGE_REPLICAS use them)"
  return 0
}
qc_srv_port() { local v=QC_SRV_PORT_$1; echo "${!v}"; }

# ------------------------------------------------------------------------------------------------ dry run
if [[ $QC_DRY_RUN == 1 ]]; then
  qc_trainer_env "$QC_RUN_DIR/segments/JOBID-N" "JOBID-N"
  cat <<EOF
# quotecite GRPO launch, dry run (nothing is started)
# repository      $QC_REPO
# run folder      $QC_RUN_DIR
# recipe          $QC_RECIPE
# max_steps       $QC_MAX_STEPS ${QC_MAX_STEPS_FROM:+($QC_MAX_STEPS_FROM)}
$(qc_plan_lines)
# judge           $QC_JUDGE_MODEL at $QC_JUDGE_URL
# embedder        $QC_EMBED_MODEL at $QC_EMBED_URL
# stop on USR1    $QC_STOP_MODE (grace ${QC_STOP_GRACE}s); chain: stop after $QC_MAX_STALLED jobs without progress
# 1. checkpoints: repair, pick the resume step, open a segment, update manifest.json
EOF
  qc_run "$QC_PY" -m launch.runlog prepare --run-dir "$QC_RUN_DIR" --job-id JOBID --max-steps "$QC_MAX_STEPS" \
    --max-stalled "$QC_MAX_STALLED" --repo "$QC_REPO" --recipe "$QC_RECIPE"
  if [[ $QC_RAY == 1 ]]; then
    echo "# Ray cluster: head here (${QC_TRAIN_NODES[0]}), a worker on each other trainer node (srun steps, watched)"
    qc_ray_start "$QC_RUN_DIR/segments/JOBID-N"
  fi
  if [[ $QC_MULTI_NODE == 0 ]]; then
    echo "# 2. servers on GPU $QC_SERVER_GPUS, one after the other (vLLM sizes its memory from what is free)"
  else
    echo "# 2. servers on their nodes' GPUs, one after the other (vLLM sizes its memory from what is free)"
  fi
  for QC_WHICH in "${QC_SERVERS[@]}"; do
    qc_serve "$QC_WHICH" "$QC_RUN_DIR/segments/JOBID-N"
  done
  [[ $QC_RAY == 1 ]] && qc_ray_wait
  if [[ ${QUOTECITE_PREFLIGHT:-1} == 0 ]]; then
    echo "# reward check skipped (QUOTECITE_PREFLIGHT=0)"
  else
    echo "# reward check (data, cache, one judge and one embedding request); a failure stops the job, no resubmission"
    qc_preflight "$QC_RUN_DIR/segments/JOBID-N"
  fi
  if [[ $QC_RAY == 1 ]]; then
    echo "# 3. trainer (EasyR1's driver) here, on the Ray cluster: ${QC_TRAIN_NODES[*]}, GPUs $QC_TRAIN_POSITIONS each"
  else
    echo "# 3. trainer on GPUs $QC_TRAINER_GPUS"
  fi
  qc_start trainer "$QC_RUN_DIR/segments/JOBID-N/trainer.log" "$QC_TRAINER_GPUS" -- \
    env "${QC_TRAINER_ENV[@]}" "${QC_TRAINER_CMD[@]}" "${QC_OVERRIDES[@]}"
  echo "# 4. on SIGUSR1: $([[ $QC_STOP_MODE == signal ]] && echo "forward SIGUSR1 to the trainer" || echo "stop the trainer once checkpoint_tracker.json advances and that step is logged") (at most ${QC_STOP_GRACE}s); on SIGTERM: stop everything, no resubmission"
  echo "# while training: a judge or embedder process that dies is restarted on its port (at most ${QUOTECITE_MAX_SERVER_RESTARTS:-5} per job); a trainer that stops on a server outage (server_outage.json in its segment) gets both servers restarted and resumes in a new segment from the last complete checkpoint (at most ${QUOTECITE_MAX_RESTARTS:-3} per job)"
  echo "# 5. stop the servers, close the segment, merge the run log, decide"
  qc_run "$QC_PY" -m launch.runlog finish --run-dir "$QC_RUN_DIR" --segment "JOBID-N" --status STATUS \
    --max-steps "$QC_MAX_STEPS" --max-stalled "$QC_MAX_STALLED"
  echo "# 6. if the run is not complete and the job made progress:"
  # shellcheck disable=SC2086
  qc_run sbatch --parsable --dependency=afterany:JOBID --job-name="${SLURM_JOB_NAME:-quotecite-grpo-8b}" \
    --output="$QC_RUN_DIR/logs/%x-%j.out" --open-mode=append --chdir="$QC_REPO" ${QUOTECITE_SBATCH_ARGS:-} \
    "$QC_REPO/launch/grpo_8b.sh" "${QC_ARGS[@]}"
  exit 0
fi

# ------------------------------------------------------------------------------------------------ the job
mkdir -p "$QC_RUN_DIR/logs"
qc_log "job $QC_JOB_ID on $(hostname -s): run $QC_RUN_DIR, max_steps $QC_MAX_STEPS ($QC_MAX_STEPS_FROM)"
if [[ $QC_MULTI_NODE == 1 ]]; then
  while read -r QC_LINE; do qc_log "${QC_LINE#\# }"; done < <(qc_plan_lines)
fi
QC_STOP_REQUESTED=0
QC_SEGMENT=""
QC_PID_judge=0
QC_PID_embed=0
QC_PID_trainer=0

# finish STATUS EXIT MESSAGE: close the segment and read the decision (QC_ACTION, QC_MESSAGE, QC_EXIT).
qc_finish() {
  local out
  out=$("$QC_PY" -m launch.runlog finish --run-dir "$QC_RUN_DIR" --segment "$QC_SEGMENT" --status "$1" \
    --trainer-exit "$2" --message "$3" --max-steps "$QC_MAX_STEPS" --max-stalled "$QC_MAX_STALLED" \
    --require-lora "$QC_REQUIRE_LORA") || qc_die "launch/runlog.py finish failed"
  eval "$out"
}

# SIGTERM (scancel, scontrol requeue, wall time, preemption): stop everything within Slurm's KillWait,
# record the segment, never submit (a requeued job resumes by itself; a cancelled chain stays cancelled).
qc_on_term() {
  trap '' TERM INT USR1
  qc_log "SIGTERM: stopping (no resubmission)"
  qc_stop "$QC_PID_trainer" trainer 5
  qc_stop "${QC_PID_check:-0}" "reward check" 5
  qc_stop_servers 5
  qc_ray_stop 8
  if [[ -n $QC_SEGMENT ]]; then
    qc_finish terminated 143 "SIGTERM from Slurm (cancel, requeue or wall time)"
    qc_log "$QC_MESSAGE"
  fi
  exit 143
}
trap qc_on_term TERM INT
trap 'QC_STOP_REQUESTED=1' USR1
# However the job ends, no Ray process outlives it.
trap 'qc_ray_stop 10' EXIT

QC_MODELS=(--model "policy=$QC_POLICY_MODEL" --model "judge=$QC_JUDGE_MODEL" --model "embedder=$QC_EMBED_MODEL")
# qc_prepare: repair the checkpoints, open a segment (QC_SEGMENT, QC_SEGMENT_DIR) or decide (QC_ACTION, QC_MESSAGE).
qc_prepare() {
  QC_PREP=$("$QC_PY" -m launch.runlog prepare --run-dir "$QC_RUN_DIR" --job-id "$QC_JOB_ID" --max-steps "$QC_MAX_STEPS" \
    --max-stalled "$QC_MAX_STALLED" --require-lora "$QC_REQUIRE_LORA" --repo "$QC_REPO" --recipe "$QC_RECIPE" \
    --easyr1-commit "$QC_EASYR1_COMMIT_FULL" --vllm-trainer "$QC_VLLM_TRAINER_VERSION" \
    --vllm-server "$QC_VLLM_SERVER_VERSION" --allow-recipe-change "${QUOTECITE_ALLOW_RECIPE_CHANGE:-0}" \
    "${QC_MODELS[@]}") || qc_die "launch/runlog.py prepare failed (see above)"
  eval "$QC_PREP"
  [[ -n $QC_CHECKPOINT_NOTES ]] && qc_log "checkpoints: $QC_CHECKPOINT_NOTES"
}
# qc_count_restart WHAT REASON: count it in the segment and manifest.json (runlog restart).
qc_count_restart() {
  local out
  out=$("$QC_PY" -m launch.runlog restart --run-dir "$QC_RUN_DIR" --segment "$QC_SEGMENT" --what "$1" \
    --reason "$2") && eval "$out" && qc_log "restarts in this run: $QC_RUN_RESTARTS"
}
# qc_check_servers: restart a server process that died while the trainer runs (the reward waits out the gap);
# returns 1 with QC_HEALTH_ERROR when it cannot (out of restarts, or it does not come back).
qc_check_servers() {
  local which pid rc label
  for which in "${QC_SERVERS[@]}"; do
    pid=QC_PID_$which
    pid=${!pid}
    ((pid > 0)) && ! kill -0 "$pid" 2>/dev/null || continue
    wait "$pid" 2>/dev/null
    rc=$?
    kill -KILL -- "-$pid" 2>/dev/null # whatever it left behind in its process group (vLLM workers)
    label=QC_SRV_LABEL_$which
    label=${!label}
    if ((QC_SERVER_RESTARTS >= QC_MAX_SERVER_RESTARTS)); then
      QC_HEALTH_ERROR="$label exited (code $rc) mid-job after $QC_SERVER_RESTARTS restarts in this job (QUOTECITE_MAX_SERVER_RESTARTS=$QC_MAX_SERVER_RESTARTS); see $QC_SEGMENT_DIR/$which.log"
      return 1
    fi
    QC_SERVER_RESTARTS=$((QC_SERVER_RESTARTS + 1))
    qc_log "$label exited (code $rc) mid-job; restarting it ($QC_SERVER_RESTARTS of at most $QC_MAX_SERVER_RESTARTS in this job)"
    qc_count_restart "${which%%[0-9]*}" "exited with code $rc"  # judge2, judge3, ...: counted as judge
    qc_serve "$which" "$QC_SEGMENT_DIR" || return 1
  done
  return 0
}

qc_prepare
case $QC_ACTION in
  done)
    qc_log "$QC_MESSAGE; nothing to do"
    exit 0
    ;;
  stop)
    qc_log "error: $QC_MESSAGE"
    exit "$QC_EXIT"
    ;;
esac
qc_log "segment $QC_SEGMENT: $QC_MESSAGE"

qc_last_step() { "$QC_PY" -m launch.runlog last-step --run-dir "$QC_RUN_DIR" 2>/dev/null || echo 0; }
qc_logged_step() { "$QC_PY" -m launch.runlog logged-step --segment-dir "$QC_SEGMENT_DIR" 2>/dev/null || echo 0; }
# Sleep that a trapped signal interrupts (a foreground sleep would delay the trap until it ends).
qc_nap() {
  sleep "$1" &
  wait $! 2>/dev/null
  kill $! 2>/dev/null
}

# A server or Ray worker failed under a running trainer: stop it and end the pass with STATUS and MESSAGE.
qc_abort_trainer() {
  qc_log "error: $2; stopping the trainer"
  qc_stop "$QC_PID_trainer" trainer 30
  wait "$QC_PID_trainer" 2>/dev/null
  QC_TRAINER_RC=$?
  QC_STATUS=$1
  QC_END_MESSAGE=$2
}

# One pass per trainer start: servers, (first pass only) the reward check, the trainer, its end. A trainer that stops
# on a judge/embedder outage (the reward's server_outage.json in its segment) gets fresh servers and a new segment
# that resumes from the last complete checkpoint, at most QUOTECITE_MAX_RESTARTS times per job.
QC_MAX_RESTARTS=${QUOTECITE_MAX_RESTARTS:-3}
QC_MAX_SERVER_RESTARTS=${QUOTECITE_MAX_SERVER_RESTARTS:-5}
QC_RESTARTS=0
QC_SERVER_RESTARTS=0
QC_STOP_HANDLED=0
QC_RAY_UP=0
while :; do
  # Several trainer nodes: the Ray cluster, once per job (it outlives a trainer restart); it joins while the servers load.
  if [[ $QC_RAY == 1 && $QC_RAY_UP == 0 ]]; then
    QC_RAY_UP=1
    if ! qc_ray_start "$QC_SEGMENT_DIR"; then
      trap '' TERM INT USR1
      qc_ray_stop
      qc_finish crashed "" "$QC_RAY_ERROR"
      qc_die "$QC_RAY_ERROR" "$QC_SEGMENT_DIR/ray-${QC_TRAIN_NODES[0]}.log"
    fi
  fi
  # Servers on the serving GPU(s), one after the other: each vLLM sizes its KV cache from the memory it finds free.
  for QC_WHICH in "${QC_SERVERS[@]}"; do
    if ! qc_serve "$QC_WHICH" "$QC_SEGMENT_DIR"; then
      trap '' TERM INT USR1
      qc_stop_servers
      qc_ray_stop
      qc_finish server_failed "" "$QC_HEALTH_ERROR"
      qc_die "$QC_HEALTH_ERROR. The chain stops here (no job submitted)." "$QC_SEGMENT_DIR/$QC_WHICH.log"
    fi
  done
  if [[ $QC_RAY == 1 ]] && ! qc_ray_wait; then
    trap '' TERM INT USR1
    qc_stop_servers
    qc_ray_stop
    qc_finish crashed "" "$QC_RAY_ERROR"
    qc_die "$QC_RAY_ERROR"
  fi

  # The reward's check against the live servers; a failure is misconfiguration: stop here, like a server that never
  # became healthy (no resubmission; the segment records the check's message).
  qc_trainer_env "$QC_SEGMENT_DIR" "$QC_SEGMENT"
  if [[ ${QUOTECITE_PREFLIGHT:-1} == 0 ]]; then
    ((QC_RESTARTS == 0)) && qc_log "reward check skipped (QUOTECITE_PREFLIGHT=0)"
  elif ((QC_RESTARTS == 0)) && [[ $QC_STOP_REQUESTED == 0 ]] && ! qc_preflight "$QC_SEGMENT_DIR"; then
    trap '' TERM INT USR1
    qc_stop_servers
    qc_ray_stop
    qc_finish check_failed "" "$QC_CHECK_ERROR"
    qc_die "$QC_CHECK_ERROR. The chain stops here (no job submitted)." "$QC_SEGMENT_DIR/check.log"
  fi

  # The trainer (unless the warning signal came while the servers were loading).
  QC_STATUS=""
  QC_TRAINER_RC=""
  QC_END_MESSAGE=""
  if [[ $QC_STOP_REQUESTED == 1 ]]; then
    qc_log "SIGUSR1 arrived before training started: not starting the trainer"
    QC_STATUS=stopped
  else
    qc_start trainer "$QC_SEGMENT_DIR/trainer.log" "$QC_TRAINER_GPUS" -- \
      env "${QC_TRAINER_ENV[@]}" "${QC_TRAINER_CMD[@]}" "${QC_OVERRIDES[@]}"
  fi

  QC_STOP_DEADLINE=0
  QC_STOP_BASE=0
  QC_LOG_WAIT_UNTIL=0
  while [[ -z $QC_STATUS ]] && kill -0 "$QC_PID_trainer" 2>/dev/null; do
    qc_nap "$QC_POLL"
    if ! qc_check_servers; then
      qc_abort_trainer server_failed "$QC_HEALTH_ERROR"
      break
    fi
    if ! qc_check_ray; then
      qc_abort_trainer crashed "$QC_RAY_ERROR"
      break
    fi
    if [[ $QC_STOP_REQUESTED == 1 && $QC_STOP_HANDLED == 0 ]]; then
      QC_STOP_HANDLED=1
      QC_STOP_DEADLINE=$((SECONDS + QC_STOP_GRACE))
      if [[ $QC_STOP_MODE == signal ]]; then
        qc_log "SIGUSR1: asking the trainer to save and exit (at most ${QC_STOP_GRACE}s)"
        kill -USR1 "$QC_PID_trainer" 2>/dev/null
      else
        QC_STOP_BASE=$(qc_last_step)
        qc_log "SIGUSR1: stopping the trainer after its next checkpoint (now at step $QC_STOP_BASE; at most ${QC_STOP_GRACE}s)"
      fi
    fi
    if [[ $QC_STOP_HANDLED == 1 ]]; then
      if ((SECONDS >= QC_STOP_DEADLINE)); then
        qc_log "no checkpoint within ${QC_STOP_GRACE}s of SIGUSR1; stopping the trainer now (steps since the last checkpoint are lost)"
        qc_stop "$QC_PID_trainer" trainer 30
      elif [[ $QC_STOP_MODE == checkpoint ]]; then
        QC_NOW_STEP=$(qc_last_step)
        if ((QC_NOW_STEP > QC_STOP_BASE)); then
          # EasyR1 logs a step's metrics right after saving its checkpoint: give it that moment.
          ((QC_LOG_WAIT_UNTIL == 0)) && QC_LOG_WAIT_UNTIL=$((SECONDS + ${QUOTECITE_LOG_WAIT:-120}))
          if (($(qc_logged_step) >= QC_NOW_STEP || SECONDS >= QC_LOG_WAIT_UNTIL)); then
            qc_log "checkpoint global_step_$QC_NOW_STEP is complete; stopping the trainer"
            qc_stop "$QC_PID_trainer" trainer 30
          fi
        fi
      fi
    fi
  done
  if [[ -z $QC_STATUS ]]; then
    wait "$QC_PID_trainer" 2>/dev/null
    QC_TRAINER_RC=$?
    if [[ $QC_STOP_HANDLED == 1 ]]; then
      QC_STATUS=stopped
    elif [[ $QC_TRAINER_RC == 0 ]]; then
      QC_STATUS=finished
    else
      QC_STATUS=crashed
      qc_check_ray || QC_END_MESSAGE=$QC_RAY_ERROR
    fi
    qc_log "trainer ended (exit $QC_TRAINER_RC, $QC_STATUS)"
  fi
  qc_stop_servers
  if [[ $QC_STATUS == crashed ]]; then
    eval "$("$QC_PY" -m launch.runlog outage --segment-dir "$QC_SEGMENT_DIR")"
    if [[ $QC_OUTAGE == 1 ]]; then
      QC_END_MESSAGE="stopped on a server outage: $QC_OUTAGE_MESSAGE"
      if ((QC_RESTARTS < QC_MAX_RESTARTS)); then
        QC_RESTARTS=$((QC_RESTARTS + 1))
        qc_log "the trainer $QC_END_MESSAGE; restarting the judge and embedding servers and the trainer from the last complete checkpoint ($QC_RESTARTS of at most $QC_MAX_RESTARTS in this job)"
        qc_finish outage "$QC_TRAINER_RC" "$QC_END_MESSAGE"
        qc_prepare
        if [[ $QC_ACTION == run ]]; then
          qc_count_restart trainer "$QC_OUTAGE_MESSAGE"
          qc_log "segment $QC_SEGMENT: $QC_MESSAGE"
          continue
        fi
        qc_log "not restarting: $QC_MESSAGE"
        [[ $QC_ACTION == done ]] && exit 0
        exit "$QC_EXIT"
      fi
      qc_log "the trainer $QC_END_MESSAGE; $QC_MAX_RESTARTS restarts in this job already (QUOTECITE_MAX_RESTARTS)"
    fi
  fi
  break
done
trap '' USR1
qc_ray_stop
qc_finish "$QC_STATUS" "$QC_TRAINER_RC" "$QC_END_MESSAGE"
[[ -n $QC_MISSING_STEPS ]] && qc_log "warning: no metrics for steps $QC_MISSING_STEPS (see run_summary.json)"
qc_log "run log: $QC_LOGGED_STEPS steps; last complete checkpoint: step $QC_END_STEP of $QC_MAX_STEPS"

case $QC_ACTION in
  continue)
    if [[ -z ${SLURM_JOB_ID:-} ]]; then
      qc_log "$QC_MESSAGE -- not under Slurm: run this script again to resume"
    elif [[ ${QUOTECITE_CHAIN:-1} != 1 ]]; then
      qc_log "$QC_MESSAGE -- QUOTECITE_CHAIN=0: not submitting"
    else
      export QUOTECITE_RUN_DIR=$QC_RUN_DIR QUOTECITE_RECIPE=$QC_RECIPE QUOTECITE_REPO=$QC_REPO
      export QUOTECITE_MAX_STEPS=$QC_MAX_STEPS
      # shellcheck disable=SC2086  # QUOTECITE_SBATCH_ARGS holds several options
      if QC_NEXT=$(qc_sbatch_clean --dependency="afterany:$SLURM_JOB_ID" --job-name="${SLURM_JOB_NAME:-quotecite-grpo-8b}" \
        --output="$QC_RUN_DIR/logs/%x-%j.out" --open-mode=append --chdir="$QC_REPO" ${QUOTECITE_SBATCH_ARGS:-} \
        "$QC_REPO/launch/grpo_8b.sh" "${QC_ARGS[@]}"); then
        qc_log "$QC_MESSAGE: job $QC_NEXT (after $SLURM_JOB_ID)"
      else
        qc_die "could not submit the next job; resubmit by hand: sbatch launch/grpo_8b.sh"
      fi
    fi
    ;;
  done) qc_log "$QC_MESSAGE" ;;
  *) qc_log "error: $QC_MESSAGE" ;;
esac
exit "$QC_EXIT"
