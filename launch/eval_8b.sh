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
# `eval score` (box metrics + judge metrics) for both. `eval infer` appends to its predictions and skips questions
# already answered, so a requeued job continues.
#
#   sbatch launch/eval_8b.sh                 # from the repository root
#   bash launch/eval_8b.sh --dry-run         # print every command and the GPU split; runs nothing
#
# Array mode (QUOTECITE_EVAL_SHARDS=N; docs/cluster.md, "Job arrays (data prep and evaluation)"): on a login node the
# script submits an array of N inference tasks (--array=1-N, 2 GPUs each; task I runs both inferences on shard I/N of
# the gold questions into BASE/predictions.shard-I-of-N.jsonl and LORA/...), then one scoring job
# (--dependency=afterok, 1 GPU; cancelled if a task fails) that merges the shards (failing when a question is missing)
# and resolves and scores as above. Rerunning the script after a failed task redoes only unanswered questions;
# QUOTECITE_EVAL_TASKS resubmits only some task ids.
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
QC_SCRIPT=$(realpath "$0")  # --help prints the block above from the file run
# --- repository: the same block in every launch script (tests/launch/test_launch_help.py checks it) ---
# sbatch runs a spool copy: the repository is QUOTECITE_REPO, else where sbatch ran, this file's, Slurm's record's
for QC_REPO in "${QUOTECITE_REPO:-}" "${SLURM_SUBMIT_DIR:-}" "$(dirname "$0")/.." \
  "$(scontrol show job "${SLURM_JOB_ID:-0}" 2>/dev/null | sed -n 's/^ *Command=\(.*\)\/launch\/[^/]*$/\1/p')"; do
  [[ -f $QC_REPO/launch/job.py ]] && break
done
[[ -f $QC_REPO/launch/job.py ]] && cd "$QC_REPO" || { echo "error: cannot find the repository; run sbatch from its root or set QUOTECITE_REPO" >&2; exit 1; }
QC_PY=${QUOTECITE_PYTHON:-.venv/bin/python}
[[ -x $QC_PY || $QC_PY != */* ]] || { echo "error: $QC_PY not found: run \`make install\` in $PWD, or set QUOTECITE_PYTHON" >&2; exit 1; }
# --- end repository ---
exec "$QC_PY" -m launch.arrays eval "$QC_SCRIPT" "$@"
