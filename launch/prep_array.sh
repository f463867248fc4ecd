#!/usr/bin/env bash
#SBATCH --job-name=quotecite-prep
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=04:00:00
#SBATCH --open-mode=append
# --- help ---
# Build the LongDocURL block cache and GRPO training set (`python -m data_prep longdocurl`) as a Slurm job array
# (docs/cluster.md, "Job arrays (data prep and evaluation)"): task I of N builds shard I/N of the documents (by a hash
# of the doc_no) into the one cache, with page images and done-markers (OUT/.state/). A final job after the array
# (cancelled if a task fails) runs `--finalize`: it builds nothing, writes train.parquet, val.parquet, summary.json,
# skipped.jsonl and overlap_report.json, and fails naming every document without a done-marker.
#
#   bash launch/prep_array.sh [--dry-run]   # on a login node: submit both jobs, or print the plan
#
# A rerun redoes only what is missing; QUOTECITE_PREP_TASKS resubmits only some tasks. Submitted as the array itself
# (`sbatch --array=1-4 launch/prep_array.sh`), task I runs shard I of QUOTECITE_PREP_SHARDS (else of
# SLURM_ARRAY_TASK_MAX) shards and no final job is submitted: run `QUOTECITE_PREP_PHASE=final sbatch
# launch/prep_array.sh` yourself.
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
exec "$QC_PY" -m launch.arrays prep "$QC_SCRIPT" "$@"
