#!/usr/bin/env bash
#SBATCH --job-name=quotecite-eval-8b
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=3
#SBATCH --cpus-per-task=32
#SBATCH --mem=141G
#SBATCH --time=06:00:00
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --output=%x-%j.out
# --- help ---
# Evaluate the trained LoRA adapter against the base model on the CiteVQA gold file, on the training job's
# allocation pattern: GPU 2 serves the judge and the quote embedder, GPU 0 runs `eval infer` for the base model
# and GPU 1 for base + adapter (in parallel), then `eval resolve` (quotes -> blocks, through the embedder) and
# `eval score` (box metrics + judge metrics) for both.
#
#   sbatch launch/eval_8b.sh                 # from the repository root
#   bash launch/eval_8b.sh --dry-run         # print every command and the GPU split; runs nothing
#
# `eval infer` appends to its predictions and skips questions already answered, so a requeued job continues.
#
# Array mode (QUOTECITE_EVAL_SHARDS=N): `bash launch/eval_8b.sh` on a login node submits inference as a Slurm
# array of N tasks (--array=1-N, 2 GPUs each): task I runs both inferences on shard I/N of the gold questions
# (`eval infer --shard I/N`: 1-based, by a hash of the question index) into BASE/predictions.shard-I-of-N.jsonl
# and LORA/...; then one scoring job (--dependency=afterok:<array job>, 1 GPU; cancelled if a task fails) serves
# the judge and the embedder, merges the shards into predictions.jsonl (failing when a question is missing) and
# resolves and scores as above. Rerunning the script after a failed task redoes only unanswered questions (each
# shard file is resumable); QUOTECITE_EVAL_TASKS resubmits only some task ids.
#   QUOTECITE_EVAL_SHARDS=8 bash launch/eval_8b.sh             # submits the array and the scoring job
#   QUOTECITE_EVAL_SHARDS=8 bash launch/eval_8b.sh --dry-run   # the plan: shards, every task's commands
#
# Settings (environment):
#   QUOTECITE_RUN_DIR        the training run (default REPO/runs/qwen3vl_8b_grpo)
#   QUOTECITE_EVAL_STEP      checkpoint step to evaluate (default: the run's last complete checkpoint: the final
#                            one, without selection, as in the paper)
#   QUOTECITE_EVAL_GOLD      gold JSONL (required)      QUOTECITE_EVAL_CACHE_DIR  block cache (required)
#   QUOTECITE_EVAL_PDF_DIR   folder of <doc_key>.pdf (optional; default: the PDFs the cache names)
#   QUOTECITE_EVAL_OUT       output folder (default RUN_DIR/eval/step_N)
#   QUOTECITE_CITEVQA_DIR    a CiteVQA checkout: its prompts/ are the two-call judge's (required unless
#                            QUOTECITE_EVAL_SCORE_ARGS has --judge-protocol rubric or --citevqa-dir)
#   QUOTECITE_POLICY_MODEL   base model (default: the recipe's worker.actor.model.model_path)
#   QUOTECITE_EVAL_INFER_ARGS, QUOTECITE_EVAL_RESOLVE_ARGS, QUOTECITE_EVAL_SCORE_ARGS: extra flags
#   QUOTECITE_INFER_CMD      program for inference (default "<server venv>/bin/python -m eval infer")
#   The venvs and the models come from the set-up step (python -m launch.setup setup, fetch-models; see status);
#   the job prints which python runs each step and stops, naming the command, when one is missing.
#   QUOTECITE_EVAL_SHARDS    array mode: number of inference shards (default 0: one job, as above)
#   QUOTECITE_EVAL_TASKS     array mode: task ids to submit (default 1-N, e.g. "3,5")
#   QUOTECITE_EVAL_SBATCH_ARGS  array mode: extra sbatch options for both jobs (e.g. "--partition=gpu")
#   QUOTECITE_EVAL_PHASE     set by array mode for its jobs: infer | score
#   and the server settings of launch/grpo_8b.sh (QUOTECITE_JUDGE_*, QUOTECITE_EMBED_*, QUOTECITE_HEALTH_TIMEOUT,
#   QUOTECITE_ENV_SETUP, QUOTECITE_JUDGE_CMD, QUOTECITE_EMBED_CMD, QUOTECITE_PYTHON).
# --- end help ---
set -uo pipefail

QC_DRY_RUN=0
for a in "$@"; do
  case $a in
    --dry-run) QC_DRY_RUN=1 ;;
    -h | --help)
      awk '/^# --- end help ---$/ {exit} shown {sub(/^# ?/, ""); print} /^# --- help ---$/ {shown = 1}' "$0"
      exit 0
      ;;
    *)
      echo "error: unknown argument '$a' (settings are environment variables; see --help)" >&2
      exit 2
      ;;
  esac
done

# --- repository: the same block in every launch script (tests/launch/test_launch_help.py checks it) ---
# Under sbatch this file runs from a spool copy: QUOTECITE_REPO, else where sbatch ran, else next to this file, else
# the script path Slurm recorded.
for QC_REPO in "${QUOTECITE_REPO:-}" "${SLURM_SUBMIT_DIR:-}" "$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)" \
  "$(scontrol show job "${SLURM_JOB_ID:-0}" 2>/dev/null | sed -n 's/^ *Command=\(.*\)\/launch\/[^/]*$/\1/p')"; do
  [[ -n $QC_REPO && -f $QC_REPO/launch/job.py ]] && break
done
[[ -f ${QC_REPO:-}/launch/job.py ]] || { echo "error: cannot find the repository; run sbatch from its root or set QUOTECITE_REPO" >&2; exit 1; }
QC_REPO=$(cd "$QC_REPO" && pwd) && cd "$QC_REPO" || exit 1
# --- end repository ---
# shellcheck source=../slurm/common.sh
source "$QC_REPO/slurm/common.sh"

QC_JOB_ID=${SLURM_JOB_ID:-local}
QC_RUN_DIR=$(realpath -m "${QUOTECITE_RUN_DIR:-$QC_REPO/runs/qwen3vl_8b_grpo}")
QC_RECIPE=$(realpath -m "${QUOTECITE_RECIPE:-$QC_REPO/recipes/qwen3vl_8b_grpo.yaml}")

qc_software
# Which python runs each step (said, never a silent fallback): `eval infer` the server venv's (vLLM), `eval
# resolve`/`eval score` and the helpers QUOTECITE_PYTHON, else the project's .venv, else the server venv's.
# QUOTECITE_ENV_SETUP=0: python3 on PATH for inference. A missing one stops the job with the command that makes it.
qc_eval_pythons() {
  local infer_what py_what
  if [[ -n ${QUOTECITE_INFER_CMD:-} ]]; then
    QC_DEFAULT_INFER=$QUOTECITE_INFER_CMD infer_what="QUOTECITE_INFER_CMD"
  elif [[ ${QUOTECITE_ENV_SETUP:-1} == 1 ]]; then
    QC_DEFAULT_INFER="$QC_SERVER_PY -m eval infer" infer_what="the server venv, vLLM $QC_VLLM_SERVER_VERSION"
  elif command -v python3 >/dev/null; then
    QC_DEFAULT_INFER="$(command -v python3) -m eval infer" infer_what="python3 on PATH, QUOTECITE_ENV_SETUP=0"
  else
    qc_die "no python3 on PATH for eval infer (QUOTECITE_ENV_SETUP=0); set QUOTECITE_INFER_CMD, or use the server venv: python -m launch.setup setup --only server"
  fi
  if [[ -n ${QUOTECITE_PYTHON:-} ]]; then
    QC_PY=$QUOTECITE_PYTHON py_what="QUOTECITE_PYTHON"
  elif [[ -x $QC_REPO/.venv/bin/python ]]; then
    QC_PY=$QC_REPO/.venv/bin/python py_what="the project's .venv"
  elif [[ ${QUOTECITE_ENV_SETUP:-1} == 1 && ($QC_DRY_RUN == 1 || -x $QC_SERVER_PY) ]]; then
    QC_PY=$QC_SERVER_PY py_what="the server venv, vLLM $QC_VLLM_SERVER_VERSION"
  else
    qc_die "no python for eval resolve/score: neither $QC_REPO/.venv (make install) nor the server venv (python -m launch.setup setup --only server); or set QUOTECITE_PYTHON"
  fi
  QC_PYTHONS_SAID=("eval infer:          $QC_DEFAULT_INFER ($infer_what)"
    "eval resolve, score: $QC_PY ($py_what)")
  # the dry run prints them in its header
  [[ $QC_DRY_RUN == 1 ]] || for infer_what in "${QC_PYTHONS_SAID[@]}"; do qc_log "python for $infer_what"; done
}
qc_eval_pythons
# every setting this script reads, typed and checked at once (launch/settings.py); the errors name each variable
"$QC_PY" -m launch.settings check --readers eval || exit 1
read -r -a QC_JUDGE_CMD <<<"${QUOTECITE_JUDGE_CMD:-$QC_DEFAULT_SERVE}"
read -r -a QC_EMBED_CMD <<<"${QUOTECITE_EMBED_CMD:-$QC_DEFAULT_SERVE}"
read -r -a QC_INFER_CMD <<<"$QC_DEFAULT_INFER"

# What to evaluate.
if [[ -n ${QUOTECITE_EVAL_STEP:-} ]]; then
  QC_STEP=$QUOTECITE_EVAL_STEP
else
  QC_STEP=$("$QC_PY" -m launch.runlog last-step --run-dir "$QC_RUN_DIR" 2>/dev/null || echo 0)
fi
QC_ADAPTER=$QC_RUN_DIR/checkpoints/global_step_$QC_STEP/actor/lora_adapter
QC_POLICY_MODEL=${QUOTECITE_POLICY_MODEL:-$(cd "$QC_REPO" && "$QC_PY" -m recipes value "$QC_RECIPE" worker.actor.model.model_path 2>/dev/null)}
QC_GOLD=${QUOTECITE_EVAL_GOLD:-}
QC_CACHE=${QUOTECITE_EVAL_CACHE_DIR:-}
QC_OUT=$(realpath -m "${QUOTECITE_EVAL_OUT:-$QC_RUN_DIR/eval/step_$QC_STEP}")
if [[ $QC_DRY_RUN != 1 ]]; then
  [[ $QC_STEP -gt 0 && -f $QC_ADAPTER/adapter_config.json ]] ||
    qc_die "no LoRA adapter at $QC_ADAPTER (set QUOTECITE_RUN_DIR or QUOTECITE_EVAL_STEP)"
  [[ -f $QC_GOLD ]] || qc_die "QUOTECITE_EVAL_GOLD must name the gold JSONL (got '${QC_GOLD}')"
  [[ -d $QC_CACHE ]] || qc_die "QUOTECITE_EVAL_CACHE_DIR must name the block cache (got '${QC_CACHE}')"
  [[ -n $QC_POLICY_MODEL ]] || qc_die "no base model: set QUOTECITE_POLICY_MODEL"
  # The paper's two-call judge reads CiteVQA's prompts from the user's checkout: fail now, not after inference.
  if [[ " ${QUOTECITE_EVAL_SCORE_ARGS:-} " != *" --judge-protocol rubric "* &&
    " ${QUOTECITE_EVAL_SCORE_ARGS:-} " != *" --citevqa-dir "* ]]; then
    [[ -d ${QUOTECITE_CITEVQA_DIR:-} ]] ||
      qc_die "QUOTECITE_CITEVQA_DIR must name a CiteVQA checkout (its prompts/ are the judge's; got '${QUOTECITE_CITEVQA_DIR:-}'), or pass --judge-protocol rubric in QUOTECITE_EVAL_SCORE_ARGS"
    export QUOTECITE_CITEVQA_DIR
  fi
fi
QC_GOLD=${QC_GOLD:-GOLD.jsonl}
QC_CACHE=${QC_CACHE:-CACHE_DIR}
QC_SHARDS=${QUOTECITE_EVAL_SHARDS:-0}
QC_PHASE=${QUOTECITE_EVAL_PHASE:-}
[[ $QC_SHARDS =~ ^[0-9]+$ ]] || qc_die "QUOTECITE_EVAL_SHARDS must be a whole number (0: no array; got '$QC_SHARDS')"
case $QC_PHASE in
  "" | infer | score) ;;
  *) qc_die "QUOTECITE_EVAL_PHASE must be infer or score (got '$QC_PHASE')" ;;
esac
[[ -n $QC_PHASE && $QC_SHARDS == 0 ]] && qc_die "QUOTECITE_EVAL_PHASE=$QC_PHASE needs QUOTECITE_EVAL_SHARDS"

QC_PDF_ARGS=()
[[ -n ${QUOTECITE_EVAL_PDF_DIR:-} ]] && QC_PDF_ARGS=(--pdf-dir "$QUOTECITE_EVAL_PDF_DIR")
qc_words QC_INFER_EXTRA "${QUOTECITE_EVAL_INFER_ARGS:-}"
qc_words QC_RESOLVE_EXTRA "${QUOTECITE_EVAL_RESOLVE_ARGS:-}"
qc_words QC_SCORE_EXTRA "${QUOTECITE_EVAL_SCORE_ARGS:-}"
QC_INFER_COMMON=(--gold "$QC_GOLD" --interface language --cache-dir "$QC_CACHE" "${QC_PDF_ARGS[@]}"
  "${QC_INFER_EXTRA[@]}")
QC_LABELS=(base "grpo-step$QC_STEP")

# qc_eval_infer TAG BASE_OUT LORA_OUT [FLAG...]: base inference on QC_GPU_BASE and base + adapter on QC_GPU_LORA
# in parallel (logs OUT/logs/infer_{base,lora}TAG.log), extra flags for both; waits for both and stops the job
# with their logs when one fails.
qc_eval_infer() {
  local tag=$1 base_out=$2 lora_out=$3 rc_base rc_lora
  shift 3
  qc_start infer_base "$QC_OUT/logs/infer_base$tag.log" "$QC_GPU_BASE" -- \
    "${QC_SERVER_ENV[@]}" "${QC_INFER_CMD[@]}" --model "$QC_POLICY_MODEL" --out "$base_out" \
    "${QC_INFER_COMMON[@]}" "$@"
  qc_start infer_lora "$QC_OUT/logs/infer_lora$tag.log" "$QC_GPU_LORA" -- \
    "${QC_SERVER_ENV[@]}" "${QC_INFER_CMD[@]}" --model "$QC_POLICY_MODEL" --lora "$QC_ADAPTER" \
    --out "$lora_out" "${QC_INFER_COMMON[@]}" "$@"
  [[ $QC_DRY_RUN == 1 ]] && return 0
  wait "$QC_PID_infer_base"
  rc_base=$?
  wait "$QC_PID_infer_lora"
  rc_lora=$?
  if ((rc_base != 0 || rc_lora != 0)); then
    qc_stop_servers
    qc_die "inference failed (base exit $rc_base, LoRA exit $rc_lora)" "$QC_OUT/logs/infer_base$tag.log" \
      "$QC_OUT/logs/infer_lora$tag.log"
  fi
}

# qc_eval_servers: start the judge, then the embedder, on QC_SERVER_GPUS; stops the job when one is not healthy.
qc_eval_servers() {
  local which
  for which in judge embed; do
    if ! qc_serve "$which" "$QC_OUT/logs"; then
      qc_stop_servers
      qc_die "$QC_HEALTH_ERROR" "$QC_OUT/logs/$which.log"
    fi
  done
}

# qc_eval_score: resolve quotes through the embedder, then score with the judge, for base and LoRA.
qc_eval_score() {
  local i=0 side
  for side in base lora; do
    qc_run "${QC_SERVER_ENV[@]}" "$QC_PY" -m eval resolve --pred "$QC_OUT/$side/predictions.jsonl" --gold "$QC_GOLD" \
      --cache-dir "$QC_CACHE" --out "$QC_OUT/$side/citations.jsonl" "${QC_RESOLVE_EXTRA[@]}" ||
      { qc_stop_servers; qc_die "eval resolve failed for $side"; }
    qc_run "${QC_SERVER_ENV[@]}" "$QC_PY" -m eval score --gold "$QC_GOLD" --pred "$QC_OUT/$side/citations.jsonl" \
      --out "$QC_OUT/$side/score" --cache-dir "$QC_CACHE" --judge-url "$QC_JUDGE_URL" --judge-model "$QC_JUDGE_MODEL" \
      --label "${QC_LABELS[$i]}" "${QC_SCORE_EXTRA[@]}" ||
      { qc_stop_servers; qc_die "eval score failed for $side"; }
    i=$((i + 1))
  done
}

qc_eval_trap() {
  trap 'qc_log "SIGTERM: stopping"; qc_stop "${QC_PID_infer_base:-0}" "base inference" 5; qc_stop "${QC_PID_infer_lora:-0}" "LoRA inference" 5; qc_stop_servers; exit 143' TERM INT
}

# ------------------------------------------------------------------------------------------ one job (default)
if [[ $QC_SHARDS == 0 ]]; then
  qc_gpu_split 2 1 || exit 1
  IFS=, read -r QC_GPU_BASE QC_GPU_LORA <<<"$QC_TRAINER_GPUS"
  qc_servers_plan
  QC_SERVER_ENV=(env "QUOTECITE_JUDGE_URL=$QC_JUDGE_URL" "QUOTECITE_EMBED_URL=$QC_EMBED_URL"
    "QUOTECITE_JUDGE_MODEL=$QC_JUDGE_MODEL" "QUOTECITE_EMBED_MODEL=$QC_EMBED_MODEL" "PYTHONPATH=$QC_REPO")
  if [[ $QC_DRY_RUN == 1 ]]; then
    cat <<EOT
# quotecite evaluation, dry run (nothing is started)
# checkpoint      step $QC_STEP: $QC_ADAPTER$([[ $QC_STEP == 0 ]] && echo " (none yet: the run's last complete checkpoint when the job runs)")
# base model      ${QC_POLICY_MODEL:-<QUOTECITE_POLICY_MODEL>}
# output          $QC_OUT
$(printf '# python          %s\n' "${QC_PYTHONS_SAID[@]}")
# GPU split       base inference CUDA_VISIBLE_DEVICES=$QC_GPU_BASE, LoRA inference CUDA_VISIBLE_DEVICES=$QC_GPU_LORA; judge + embedder CUDA_VISIBLE_DEVICES=$QC_SERVER_GPUS
# 1. servers on GPU $QC_SERVER_GPUS, one after the other
EOT
  else
    mkdir -p "$QC_OUT/base" "$QC_OUT/lora" "$QC_OUT/logs"
    qc_log "evaluating step $QC_STEP of $QC_RUN_DIR into $QC_OUT"
    qc_eval_trap
  fi
  qc_eval_servers
  [[ $QC_DRY_RUN == 1 ]] && echo "# 2. inference, base and base + adapter in parallel"
  qc_eval_infer "" "$QC_OUT/base/predictions.jsonl" "$QC_OUT/lora/predictions.jsonl"
  [[ $QC_DRY_RUN == 1 ]] && echo "# 3. resolve quotes through the embedder, then score with the judge"
  qc_eval_score
  qc_stop_servers
  [[ $QC_DRY_RUN == 1 ]] || qc_log "done: $QC_OUT/base/score and $QC_OUT/lora/score"
  exit 0
fi

# ------------------------------------------------------------------------------------------ array mode
qc_shard_name() { echo "predictions.shard-$1-of-$QC_SHARDS.jsonl"; } # as eval.infer.shard_file names them
QC_LIMIT=
[[ " ${QUOTECITE_EVAL_INFER_ARGS:-} " =~ [[:space:]]--limit[=[:space:]]+([0-9]+)[[:space:]] ]] &&
  QC_LIMIT=${BASH_REMATCH[1]}

if [[ -z $QC_PHASE ]]; then # submit the array and the scoring job
  QC_TASKS=${QUOTECITE_EVAL_TASKS:-1-$QC_SHARDS}
  [[ $QC_TASKS =~ ^[0-9,-]+$ ]] ||
    qc_die "QUOTECITE_EVAL_TASKS must be array ids such as '1-$QC_SHARDS' or '2,4' (got '$QC_TASKS')"
  qc_words QC_SBATCH_EXTRA "${QUOTECITE_EVAL_SBATCH_ARGS:-}"
  QC_EXPORT="ALL,QUOTECITE_REPO=$QC_REPO,QUOTECITE_RUN_DIR=$QC_RUN_DIR,QUOTECITE_EVAL_STEP=$QC_STEP"
  QC_EXPORT+=",QUOTECITE_EVAL_OUT=$QC_OUT,QUOTECITE_EVAL_SHARDS=$QC_SHARDS"
  QC_SCRIPT=$QC_REPO/launch/eval_8b.sh
  QC_ARRAY_SBATCH=(--array="$QC_TASKS" --gpus-per-node=2 --output="$QC_OUT/logs/infer-%A_%a.out"
    "${QC_SBATCH_EXTRA[@]}" --export="$QC_EXPORT,QUOTECITE_EVAL_PHASE=infer" "$QC_SCRIPT")
  qc_score_sbatch() {
    QC_FINAL_SBATCH=(--dependency="afterok:$1" --kill-on-invalid-dep=yes --gpus-per-node=1
      --output="$QC_OUT/logs/score-%j.out" "${QC_SBATCH_EXTRA[@]}" --export="$QC_EXPORT,QUOTECITE_EVAL_PHASE=score"
      "$QC_SCRIPT")
  }
  if [[ $QC_DRY_RUN != 1 ]]; then
    mkdir -p "$QC_OUT/base" "$QC_OUT/lora" "$QC_OUT/logs" || qc_die "cannot create $QC_OUT"
    qc_submit_chain "inference array" "scoring job" qc_score_sbatch
    echo "array job $QC_ARRAY_JOB: inference shards $QC_TASKS of $QC_SHARDS (logs $QC_OUT/logs/infer-${QC_ARRAY_JOB}_*.out)"
    echo "score job $QC_FINAL_JOB: after afterok:$QC_ARRAY_JOB (log $QC_OUT/logs/score-$QC_FINAL_JOB.out)"
    exit 0
  fi
  cat <<EOT
# quotecite evaluation as a Slurm array, dry run (nothing is submitted)
# checkpoint      step $QC_STEP: $QC_ADAPTER$([[ $QC_STEP == 0 ]] && echo " (none yet: the run's last complete checkpoint at submission)")
# base model      ${QC_POLICY_MODEL:-<QUOTECITE_POLICY_MODEL>}
# output          $QC_OUT
$(printf '# python          %s\n' "${QC_PYTHONS_SAID[@]}")
# shards          $QC_SHARDS (1-based, by a hash of the gold index), array tasks $QC_TASKS
EOT
  if [[ -f $QC_GOLD ]]; then
    "$QC_PY" - "$QC_GOLD" "$QC_SHARDS" "$QC_LIMIT" <<'EOT' || qc_die "cannot read $QC_GOLD"
import sys

from data_prep.shards import shard_plan
from eval.schemas import read_gold

limit = int(sys.argv[3]) if sys.argv[3] else None
print("\n".join(shard_plan([g.key for g in read_gold(sys.argv[1])[:limit]], int(sys.argv[2]), "questions")))
EOT
  fi
  echo "# 1. the inference array, 2 GPUs a task:"
  echo "+ sbatch --parsable $(qc_quote "${QC_ARRAY_SBATCH[@]}")"
  qc_gpu_split 2 0 || exit 1
  IFS=, read -r QC_GPU_BASE QC_GPU_LORA <<<"$QC_TRAINER_GPUS"
  QC_SERVER_ENV=(env "PYTHONPATH=$QC_REPO")
  for ((QC_I = 1; QC_I <= QC_SHARDS; QC_I++)); do
    echo "#   task $QC_I, shard $QC_I/$QC_SHARDS:"
    qc_eval_infer "-$QC_I" "$QC_OUT/base/$(qc_shard_name $QC_I)" "$QC_OUT/lora/$(qc_shard_name $QC_I)" \
      --shard "$QC_I/$QC_SHARDS"
  done
  qc_score_sbatch ARRAYJOB
  echo "# 2. the scoring job, 1 GPU, after every task succeeded (cancelled if one fails):"
  echo "+ sbatch --parsable $(qc_quote "${QC_FINAL_SBATCH[@]}")"
  QC_PHASE=score
fi

if [[ $QC_PHASE == infer ]]; then # array task: both inferences on this task's shard
  QC_I=${SLURM_ARRAY_TASK_ID:-}
  [[ $QC_I =~ ^[0-9]+$ ]] && ((QC_I >= 1 && QC_I <= QC_SHARDS)) ||
    qc_die "QUOTECITE_EVAL_PHASE=infer runs as array task 1..$QC_SHARDS (SLURM_ARRAY_TASK_ID='$QC_I')"
  qc_gpu_split 2 0 || exit 1
  IFS=, read -r QC_GPU_BASE QC_GPU_LORA <<<"$QC_TRAINER_GPUS"
  QC_SERVER_ENV=(env "PYTHONPATH=$QC_REPO") # inference needs no server
  mkdir -p "$QC_OUT/base" "$QC_OUT/lora" "$QC_OUT/logs"
  qc_log "inference shard $QC_I/$QC_SHARDS of step $QC_STEP into $QC_OUT"
  qc_eval_trap
  qc_eval_infer "-$QC_I" "$QC_OUT/base/$(qc_shard_name "$QC_I")" "$QC_OUT/lora/$(qc_shard_name "$QC_I")" \
    --shard "$QC_I/$QC_SHARDS"
  qc_log "done: shard $QC_I/$QC_SHARDS"
  exit 0
fi

# QC_PHASE=score: serve, merge the shards, resolve and score.
qc_gpu_split 0 1 || exit 1
qc_servers_plan
QC_SERVER_ENV=(env "QUOTECITE_JUDGE_URL=$QC_JUDGE_URL" "QUOTECITE_EMBED_URL=$QC_EMBED_URL"
  "QUOTECITE_JUDGE_MODEL=$QC_JUDGE_MODEL" "QUOTECITE_EMBED_MODEL=$QC_EMBED_MODEL" "PYTHONPATH=$QC_REPO")
if [[ $QC_DRY_RUN == 1 ]]; then
  echo "#   servers on GPU $QC_SERVER_GPUS, one after the other:"
else
  mkdir -p "$QC_OUT/base" "$QC_OUT/lora" "$QC_OUT/logs"
  qc_log "scoring step $QC_STEP of $QC_RUN_DIR from $QC_SHARDS inference shards in $QC_OUT"
  qc_eval_trap
fi
qc_eval_servers
[[ $QC_DRY_RUN == 1 ]] && echo "#   merge the $QC_SHARDS shards of each side into predictions.jsonl (fails on a missing question):"
for QC_SIDE in base lora; do
  qc_run "$QC_PY" -c 'import sys; from pathlib import Path; from eval.infer import merge_shards; n = merge_shards(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if sys.argv[4] else None); print(f"{sys.argv[2]}: {n} predictions merged from {sys.argv[3]} shards")' \
    "$QC_GOLD" "$QC_OUT/$QC_SIDE/predictions.jsonl" "$QC_SHARDS" "$QC_LIMIT" ||
    { qc_stop_servers; qc_die "merging the $QC_SIDE inference shards failed"; }
done
[[ $QC_DRY_RUN == 1 ]] && echo "#   resolve quotes through the embedder, then score with the judge:"
qc_eval_score
qc_stop_servers
[[ $QC_DRY_RUN == 1 ]] || qc_log "done: $QC_OUT/base/score and $QC_OUT/lora/score"
