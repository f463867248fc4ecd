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
# Evaluate the trained LoRA adapter against the base model on the CiteVQA gold file: GPU 0 runs `eval infer` for
# the base model and GPU 1 for base + adapter (in parallel), GPU 2 serves the judge and the quote embedder for
# `eval resolve` (quotes -> blocks) and `eval score` of both. `eval infer` skips questions already answered, so a
# requeued job continues.
#
#   sbatch launch/eval_8b.sh                 # from the repository root
#   bash launch/eval_8b.sh --dry-run         # print every command and the GPU split; runs nothing
#
# Array mode (QUOTECITE_EVAL_SHARDS=N; docs/cluster.md, "Job arrays (data prep and evaluation)"): from a login node,
# N inference tasks (2 GPUs each; task I answers shard I/N of the questions), then one scoring job after them (1 GPU;
# cancelled if a task fails) that merges the shards and resolves and scores as above. A rerun redoes only unanswered
# questions; QUOTECITE_EVAL_TASKS resubmits only some task ids.
#   QUOTECITE_EVAL_SHARDS=8 bash launch/eval_8b.sh [--dry-run]   # submit the array and the scoring job, or plan them
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
