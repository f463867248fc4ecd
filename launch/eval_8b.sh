#!/usr/bin/env bash
#SBATCH --job-name=quotecite-eval-8b
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=3
#SBATCH --cpus-per-task=32
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

QC_JOB_ID=${SLURM_JOB_ID:-local}
QC_RUN_DIR=$(realpath -m "${QUOTECITE_RUN_DIR:-$QC_REPO/runs/qwen3vl_8b_grpo}")
QC_RECIPE=$(realpath -m "${QUOTECITE_RECIPE:-$QC_REPO/recipes/qwen3vl_8b_grpo.yaml}")

qc_software
if [[ ${QUOTECITE_ENV_SETUP:-1} == 1 ]]; then
  QC_DEFAULT_INFER="$QC_SERVER_PY -m eval infer"
else
  QC_DEFAULT_INFER="python3 -m eval infer"
fi
qc_pick_python
read -r -a QC_JUDGE_CMD <<<"${QUOTECITE_JUDGE_CMD:-$QC_DEFAULT_SERVE}"
read -r -a QC_EMBED_CMD <<<"${QUOTECITE_EMBED_CMD:-$QC_DEFAULT_SERVE}"
read -r -a QC_INFER_CMD <<<"${QUOTECITE_INFER_CMD:-$QC_DEFAULT_INFER}"

# What to evaluate.
if [[ -n ${QUOTECITE_EVAL_STEP:-} ]]; then
  QC_STEP=$QUOTECITE_EVAL_STEP
else
  QC_STEP=$("$QC_PY" -m launch.runlog last-step --run-dir "$QC_RUN_DIR" 2>/dev/null || echo 0)
fi
QC_ADAPTER=$QC_RUN_DIR/checkpoints/global_step_$QC_STEP/actor/lora_adapter
QC_POLICY_MODEL=${QUOTECITE_POLICY_MODEL:-$("$QC_PY" -c '
import sys, yaml
print(((yaml.safe_load(open(sys.argv[1])) or {}).get("worker", {}).get("actor", {}).get("model", {}) or {}).get("model_path", ""))
' "$QC_RECIPE" 2>/dev/null)}
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

qc_gpu_split 2 1 || exit 1
IFS=, read -r QC_GPU_BASE QC_GPU_LORA <<<"$QC_TRAINER_GPUS"
qc_servers_plan

QC_PDF_ARGS=()
[[ -n ${QUOTECITE_EVAL_PDF_DIR:-} ]] && QC_PDF_ARGS=(--pdf-dir "$QUOTECITE_EVAL_PDF_DIR")
# shellcheck disable=SC2206  # extra flags split on spaces
QC_INFER_COMMON=(--gold "$QC_GOLD" --interface language --cache-dir "$QC_CACHE" "${QC_PDF_ARGS[@]}"
  ${QUOTECITE_EVAL_INFER_ARGS:-})
QC_LABELS=(base "grpo-step$QC_STEP")
QC_SERVER_ENV=(env "QUOTECITE_JUDGE_URL=$QC_JUDGE_URL" "QUOTECITE_EMBED_URL=$QC_EMBED_URL"
  "QUOTECITE_JUDGE_MODEL=$QC_JUDGE_MODEL" "QUOTECITE_EMBED_MODEL=$QC_EMBED_MODEL" "PYTHONPATH=$QC_REPO")

if [[ $QC_DRY_RUN == 1 ]]; then
  cat <<EOF
# quotecite evaluation, dry run (nothing is started)
# checkpoint      step $QC_STEP: $QC_ADAPTER$([[ $QC_STEP == 0 ]] && echo " (none yet: the run's last complete checkpoint when the job runs)")
# base model      ${QC_POLICY_MODEL:-<QUOTECITE_POLICY_MODEL>}
# output          $QC_OUT
# GPU split       base inference CUDA_VISIBLE_DEVICES=$QC_GPU_BASE, LoRA inference CUDA_VISIBLE_DEVICES=$QC_GPU_LORA; judge + embedder CUDA_VISIBLE_DEVICES=$QC_SERVER_GPUS
# 1. servers on GPU $QC_SERVER_GPUS, one after the other
EOF
else
  mkdir -p "$QC_OUT/base" "$QC_OUT/lora" "$QC_OUT/logs"
  qc_log "evaluating step $QC_STEP of $QC_RUN_DIR into $QC_OUT"
  trap 'qc_log "SIGTERM: stopping"; qc_stop "${QC_PID_infer_base:-0}" "base inference" 5; qc_stop "${QC_PID_infer_lora:-0}" "LoRA inference" 5; qc_stop_servers; exit 143' TERM INT
fi
for QC_WHICH in judge embed; do
  if ! qc_serve "$QC_WHICH" "$QC_OUT/logs"; then
    qc_stop_servers
    qc_die "$QC_HEALTH_ERROR" "$QC_OUT/logs/$QC_WHICH.log"
  fi
done

[[ $QC_DRY_RUN == 1 ]] && echo "# 2. inference, base and base + adapter in parallel"
qc_start infer_base "$QC_OUT/logs/infer_base.log" "$QC_GPU_BASE" -- \
  "${QC_SERVER_ENV[@]}" "${QC_INFER_CMD[@]}" --model "$QC_POLICY_MODEL" --out "$QC_OUT/base/predictions.jsonl" \
  "${QC_INFER_COMMON[@]}"
qc_start infer_lora "$QC_OUT/logs/infer_lora.log" "$QC_GPU_LORA" -- \
  "${QC_SERVER_ENV[@]}" "${QC_INFER_CMD[@]}" --model "$QC_POLICY_MODEL" --lora "$QC_ADAPTER" \
  --out "$QC_OUT/lora/predictions.jsonl" "${QC_INFER_COMMON[@]}"
if [[ $QC_DRY_RUN != 1 ]]; then
  wait "$QC_PID_infer_base"
  rc_base=$?
  wait "$QC_PID_infer_lora"
  rc_lora=$?
  if ((rc_base != 0 || rc_lora != 0)); then
    qc_stop_servers
    qc_die "inference failed (base exit $rc_base, LoRA exit $rc_lora)" "$QC_OUT/logs/infer_base.log" \
      "$QC_OUT/logs/infer_lora.log"
  fi
fi

[[ $QC_DRY_RUN == 1 ]] && echo "# 3. resolve quotes through the embedder, then score with the judge"
QC_I=0
for QC_SIDE in base lora; do
  # shellcheck disable=SC2086
  qc_run "${QC_SERVER_ENV[@]}" "$QC_PY" -m eval resolve --pred "$QC_OUT/$QC_SIDE/predictions.jsonl" --gold "$QC_GOLD" \
    --cache-dir "$QC_CACHE" --out "$QC_OUT/$QC_SIDE/citations.jsonl" ${QUOTECITE_EVAL_RESOLVE_ARGS:-} ||
    { qc_stop_servers; qc_die "eval resolve failed for $QC_SIDE"; }
  # shellcheck disable=SC2086
  qc_run "${QC_SERVER_ENV[@]}" "$QC_PY" -m eval score --gold "$QC_GOLD" --pred "$QC_OUT/$QC_SIDE/citations.jsonl" \
    --out "$QC_OUT/$QC_SIDE/score" --cache-dir "$QC_CACHE" --judge-url "$QC_JUDGE_URL" --judge-model "$QC_JUDGE_MODEL" \
    --label "${QC_LABELS[$QC_I]}" ${QUOTECITE_EVAL_SCORE_ARGS:-} ||
    { qc_stop_servers; qc_die "eval score failed for $QC_SIDE"; }
  QC_I=$((QC_I + 1))
done
qc_stop_servers
[[ $QC_DRY_RUN == 1 ]] || qc_log "done: $QC_OUT/base/score and $QC_OUT/lora/score"
