#!/usr/bin/env bash
#SBATCH --job-name=quotecite-grpo-8b
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=3
#SBATCH --cpus-per-task=32
#SBATCH --time=08:00:00
#SBATCH --signal=B:USR1@3600
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --output=%x-%j.out
# --- help ---
# GRPO training of Qwen3-VL-8B with the quote-and-retrieve reward, as a chain of Slurm jobs on 3 GPUs each.
#
#   sbatch launch/grpo_8b.sh [key=value ...]      # from the repository root; extra args are EasyR1 overrides
#   bash launch/grpo_8b.sh --dry-run [key=value ...]   # print every command and the GPU split; runs nothing
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
QC_N_TRAIN_GPUS=2
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
  "trainer.nnodes=1"
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
qc_gpu_split "$QC_N_TRAIN_GPUS" 1 || exit 1
qc_servers_plan

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

# ------------------------------------------------------------------------------------------------ dry run
if [[ $QC_DRY_RUN == 1 ]]; then
  qc_trainer_env "$QC_RUN_DIR/segments/JOBID-N" "JOBID-N"
  cat <<EOF
# quotecite GRPO launch, dry run (nothing is started)
# repository      $QC_REPO
# run folder      $QC_RUN_DIR
# recipe          $QC_RECIPE
# max_steps       $QC_MAX_STEPS ${QC_MAX_STEPS_FROM:+($QC_MAX_STEPS_FROM)}
# GPU split       trainer CUDA_VISIBLE_DEVICES=$QC_TRAINER_GPUS (trainer.n_gpus_per_node=$QC_N_TRAIN_GPUS); judge + embedder CUDA_VISIBLE_DEVICES=$QC_SERVER_GPUS
# judge           $QC_JUDGE_MODEL at $QC_JUDGE_URL
# embedder        $QC_EMBED_MODEL at $QC_EMBED_URL
# stop on USR1    $QC_STOP_MODE (grace ${QC_STOP_GRACE}s); chain: stop after $QC_MAX_STALLED jobs without progress
# 1. checkpoints: repair, pick the resume step, open a segment, update manifest.json
EOF
  qc_run "$QC_PY" -m launch.runlog prepare --run-dir "$QC_RUN_DIR" --job-id JOBID --max-steps "$QC_MAX_STEPS" \
    --max-stalled "$QC_MAX_STALLED" --repo "$QC_REPO" --recipe "$QC_RECIPE"
  echo "# 2. servers on GPU $QC_SERVER_GPUS, one after the other (vLLM sizes its memory from what is free)"
  qc_serve judge "$QC_RUN_DIR/segments/JOBID-N"
  qc_serve embed "$QC_RUN_DIR/segments/JOBID-N"
  if [[ ${QUOTECITE_PREFLIGHT:-1} == 0 ]]; then
    echo "# reward check skipped (QUOTECITE_PREFLIGHT=0)"
  else
    echo "# reward check (data, cache, one judge and one embedding request); a failure stops the job, no resubmission"
    qc_preflight "$QC_RUN_DIR/segments/JOBID-N"
  fi
  echo "# 3. trainer on GPUs $QC_TRAINER_GPUS"
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
  if [[ -n $QC_SEGMENT ]]; then
    qc_finish terminated 143 "SIGTERM from Slurm (cancel, requeue or wall time)"
    qc_log "$QC_MESSAGE"
  fi
  exit 143
}
trap qc_on_term TERM INT
trap 'QC_STOP_REQUESTED=1' USR1

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
  for which in judge embed; do
    pid=QC_PID_$which
    pid=${!pid}
    ((pid > 0)) && ! kill -0 "$pid" 2>/dev/null || continue
    wait "$pid" 2>/dev/null
    rc=$?
    kill -KILL -- "-$pid" 2>/dev/null # whatever it left behind in its process group (vLLM workers)
    [[ $which == judge ]] && label=$QC_JUDGE_LABEL || label=$QC_EMBED_LABEL
    if ((QC_SERVER_RESTARTS >= QC_MAX_SERVER_RESTARTS)); then
      QC_HEALTH_ERROR="$label exited (code $rc) mid-job after $QC_SERVER_RESTARTS restarts in this job (QUOTECITE_MAX_SERVER_RESTARTS=$QC_MAX_SERVER_RESTARTS); see $QC_SEGMENT_DIR/$which.log"
      return 1
    fi
    QC_SERVER_RESTARTS=$((QC_SERVER_RESTARTS + 1))
    qc_log "$label exited (code $rc) mid-job; restarting it ($QC_SERVER_RESTARTS of at most $QC_MAX_SERVER_RESTARTS in this job)"
    qc_count_restart "$which" "exited with code $rc"
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

# One pass per trainer start: servers, (first pass only) the reward check, the trainer, its end. A trainer that stops
# on a judge/embedder outage (the reward's server_outage.json in its segment) gets fresh servers and a new segment
# that resumes from the last complete checkpoint, at most QUOTECITE_MAX_RESTARTS times per job.
QC_MAX_RESTARTS=${QUOTECITE_MAX_RESTARTS:-3}
QC_MAX_SERVER_RESTARTS=${QUOTECITE_MAX_SERVER_RESTARTS:-5}
QC_RESTARTS=0
QC_SERVER_RESTARTS=0
QC_STOP_HANDLED=0
while :; do
  # Servers on the third GPU, one after the other: each vLLM sizes its KV cache from the memory it finds free.
  for QC_WHICH in judge embed; do
    if ! qc_serve "$QC_WHICH" "$QC_SEGMENT_DIR"; then
      trap '' TERM INT USR1
      qc_stop_servers
      qc_finish server_failed "" "$QC_HEALTH_ERROR"
      qc_die "$QC_HEALTH_ERROR. The chain stops here (no job submitted)." "$QC_SEGMENT_DIR/$QC_WHICH.log"
    fi
  done

  # The reward's check against the live servers; a failure is misconfiguration: stop here, like a server that never
  # became healthy (no resubmission; the segment records the check's message).
  qc_trainer_env "$QC_SEGMENT_DIR" "$QC_SEGMENT"
  if [[ ${QUOTECITE_PREFLIGHT:-1} == 0 ]]; then
    ((QC_RESTARTS == 0)) && qc_log "reward check skipped (QUOTECITE_PREFLIGHT=0)"
  elif ((QC_RESTARTS == 0)) && [[ $QC_STOP_REQUESTED == 0 ]] && ! qc_preflight "$QC_SEGMENT_DIR"; then
    trap '' TERM INT USR1
    qc_stop_servers
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
      qc_log "error: $QC_HEALTH_ERROR; stopping the trainer"
      qc_stop "$QC_PID_trainer" trainer 30
      wait "$QC_PID_trainer" 2>/dev/null
      QC_TRAINER_RC=$?
      QC_STATUS=server_failed
      QC_END_MESSAGE=$QC_HEALTH_ERROR
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
