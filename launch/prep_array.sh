#!/usr/bin/env bash
#SBATCH --job-name=quotecite-prep
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=04:00:00
#SBATCH --open-mode=append
# --- help ---
# Build the LongDocURL block cache and GRPO training set (`python -m data_prep longdocurl`) as a Slurm job array:
# task I of N parses and embeds only its shard of the PDFs (`--shard I/N`: 1-based, by a hash of the doc_no, so a
# document's shard never changes when others are added) into the one content-addressed cache, renders its page
# images and writes its done-markers (OUT/.state/); no parquet. A final job, submitted with
# --dependency=afterok:<array job> (and --kill-on-invalid-dep=yes, so it is cancelled, not left pending, when a
# task fails), runs `--finalize`: it builds nothing, writes train.parquet, val.parquet, summary.json,
# skipped.jsonl and overlap_report.json from the done-markers, and fails naming every document that has none.
#
#   bash launch/prep_array.sh             # from the repository root, on a login node: submits both jobs
#   bash launch/prep_array.sh --dry-run   # print the plan (shards and their documents, commands, dependency)
#
# Array task ids are the shard numbers (--array=1-N), so Slurm's SLURM_ARRAY_TASK_ID is I. Rerunning after some
# tasks failed redoes only what is missing: run the script again (every task skips the documents whose
# done-marker, cache entry and images are present; cache entries are atomic and content-addressed), or resubmit
# only the failed tasks with QUOTECITE_PREP_TASKS (the final job waits for those). The script can also be
# submitted as the array itself: `sbatch --array=1-4 launch/prep_array.sh` runs task SLURM_ARRAY_TASK_ID of
# QUOTECITE_PREP_SHARDS (else of SLURM_ARRAY_TASK_MAX) shards and submits no final job: then run
# `QUOTECITE_PREP_PHASE=final sbatch launch/prep_array.sh` (or `bash` it) yourself.
#
# Settings (environment; passed on to the jobs):
#   QUOTECITE_PREP_JSONL      LongDocURL.jsonl (required)
#   QUOTECITE_PREP_PDF_DIR    folder of the LongDocURL PDFs (required; searched recursively)
#   QUOTECITE_PREP_OUT        output folder (default REPO/data/longdocurl)
#   QUOTECITE_PREP_SHARDS     number of shards = array tasks (default 8)
#   QUOTECITE_PREP_ARGS       extra `data_prep longdocurl` flags for every task and the final job (they must be
#                             the same for all: they are part of each document's done-marker key), e.g.
#                             "--cache-dir /scratch/cache --eval-pdfs /data/citevqa/pdfs --encoder minilm"
#   QUOTECITE_PREP_TASKS      array ids to submit (default 1-N), e.g. "2,4" to rerun only those shards
#   QUOTECITE_PREP_SBATCH_ARGS  extra sbatch options for both jobs (e.g. "--partition=cpu --account=x")
#   QUOTECITE_PREP_LOG_DIR    Slurm logs (default OUT/logs: shard-<array job>_<task>.out, final-<job>.out)
#   QUOTECITE_PREP_CMD        the program (default "<python> -m data_prep longdocurl")
#   QUOTECITE_PYTHON          the python (default REPO/.venv/bin/python, else python3)
#   QUOTECITE_PREP_PHASE      set by the script for its jobs: shard | final (unset: submit)
#   QUOTECITE_PREP_FAIL_TASK  test hook only: array task ids (comma list) that exit 1 before doing any work
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

QC_JOB_ID=${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-local}}${SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}
qc_pick_python
# every setting this script reads, typed and checked at once (launch/settings.py); the errors name each variable
"$QC_PY" -m launch.settings check --readers prep || exit 1
QC_OUT=$(realpath -m "${QUOTECITE_PREP_OUT:-$QC_REPO/data/longdocurl}")
QC_LOG_DIR=$(realpath -m "${QUOTECITE_PREP_LOG_DIR:-$QC_OUT/logs}")
QC_JSONL=${QUOTECITE_PREP_JSONL:-}
QC_PDF_DIR=${QUOTECITE_PREP_PDF_DIR:-}
QC_PHASE=${QUOTECITE_PREP_PHASE:-}
[[ -z $QC_PHASE && -n ${SLURM_ARRAY_TASK_ID:-} ]] && QC_PHASE=shard # submitted as the array by hand
QC_SHARDS=${QUOTECITE_PREP_SHARDS:-}
if [[ -z $QC_SHARDS ]]; then
  if [[ $QC_PHASE == shard ]]; then QC_SHARDS=${SLURM_ARRAY_TASK_MAX:-}; else QC_SHARDS=8; fi
fi
[[ $QC_SHARDS =~ ^[1-9][0-9]*$ ]] ||
  qc_die "QUOTECITE_PREP_SHARDS must be a whole number of shards >= 1 (got '${QC_SHARDS}')"
QC_TASKS=${QUOTECITE_PREP_TASKS:-1-$QC_SHARDS}
[[ $QC_TASKS =~ ^[0-9,-]+$ ]] ||
  qc_die "QUOTECITE_PREP_TASKS must be array ids such as '1-$QC_SHARDS' or '2,4' (got '$QC_TASKS')"
read -r -a QC_CMD <<<"${QUOTECITE_PREP_CMD:-$QC_PY -m data_prep longdocurl}"
qc_words QC_PREP_EXTRA "${QUOTECITE_PREP_ARGS:-}"
QC_ARGS=(--jsonl "${QC_JSONL:-LongDocURL.jsonl}" --pdf-dir "${QC_PDF_DIR:-PDF_DIR}" --out "$QC_OUT"
  "${QC_PREP_EXTRA[@]}")

if [[ $QC_DRY_RUN != 1 && $QC_PHASE != shard ]]; then
  [[ -f $QC_JSONL ]] || qc_die "QUOTECITE_PREP_JSONL must name LongDocURL.jsonl (got '${QC_JSONL}')"
  [[ -d $QC_PDF_DIR ]] || qc_die "QUOTECITE_PREP_PDF_DIR must name the PDF folder (got '${QC_PDF_DIR}')"
fi

# ------------------------------------------------------------------------------------------ inside a job
if [[ $QC_PHASE == shard ]]; then
  QC_I=${SLURM_ARRAY_TASK_ID:-}
  [[ $QC_I =~ ^[0-9]+$ ]] || qc_die "QUOTECITE_PREP_PHASE=shard runs as an array task (no SLURM_ARRAY_TASK_ID)"
  if [[ ",${QUOTECITE_PREP_FAIL_TASK:-}," == *",$QC_I,"* ]]; then
    qc_die "test hook QUOTECITE_PREP_FAIL_TASK: task $QC_I fails before doing any work"
  fi
  qc_log "shard $QC_I/$QC_SHARDS: $(qc_quote "${QC_CMD[@]}" "${QC_ARGS[@]}" --shard "$QC_I/$QC_SHARDS")"
  "${QC_CMD[@]}" "${QC_ARGS[@]}" --shard "$QC_I/$QC_SHARDS"
  rc=$?
  ((rc == 0)) || qc_die "shard $QC_I/$QC_SHARDS failed (exit $rc)"
  qc_log "shard $QC_I/$QC_SHARDS done"
  exit 0
fi
if [[ $QC_PHASE == final ]]; then
  qc_log "final step: $(qc_quote "${QC_CMD[@]}" "${QC_ARGS[@]}" --finalize)"
  "${QC_CMD[@]}" "${QC_ARGS[@]}" --finalize
  rc=$?
  ((rc == 0)) || qc_die "final step failed (exit $rc); rerun the missing shards, then this step"
  qc_log "done: $QC_OUT"
  exit 0
fi
[[ -z $QC_PHASE ]] || qc_die "QUOTECITE_PREP_PHASE must be shard or final (got '$QC_PHASE')"

# ------------------------------------------------------------------------------------------ submit
qc_words QC_SBATCH_EXTRA "${QUOTECITE_PREP_SBATCH_ARGS:-}"
QC_EXPORT="ALL,QUOTECITE_REPO=$QC_REPO,QUOTECITE_PREP_OUT=$QC_OUT,QUOTECITE_PREP_SHARDS=$QC_SHARDS"
QC_SCRIPT=$QC_REPO/launch/prep_array.sh
QC_ARRAY_SBATCH=(--array="$QC_TASKS" --output="$QC_LOG_DIR/shard-%A_%a.out" "${QC_SBATCH_EXTRA[@]}"
  --export="$QC_EXPORT,QUOTECITE_PREP_PHASE=shard" "$QC_SCRIPT")
qc_final_sbatch() { # ARRAY_JOB_ID
  QC_FINAL_SBATCH=(--dependency="afterok:$1" --kill-on-invalid-dep=yes --output="$QC_LOG_DIR/final-%j.out"
    "${QC_SBATCH_EXTRA[@]}" --export="$QC_EXPORT,QUOTECITE_PREP_PHASE=final" "$QC_SCRIPT")
}

if [[ $QC_DRY_RUN == 1 ]]; then
  echo "# quotecite data prep as a Slurm array, dry run (nothing is submitted)"
  echo "# input           ${QC_JSONL:-<QUOTECITE_PREP_JSONL>}, PDFs under ${QC_PDF_DIR:-<QUOTECITE_PREP_PDF_DIR>}"
  echo "# output          $QC_OUT (logs $QC_LOG_DIR)"
  echo "# shards          $QC_SHARDS (1-based, by a hash of doc_no), array tasks $QC_TASKS"
  if [[ -f $QC_JSONL ]]; then
    "$QC_PY" - "$QC_JSONL" "$QC_SHARDS" <<'EOF' || qc_die "cannot read $QC_JSONL"
import sys

from data_prep.longdocurl import load_records
from data_prep.shards import shard_plan

print("\n".join(shard_plan({r.doc_no for r in load_records(sys.argv[1])}, int(sys.argv[2]), "documents")))
EOF
  fi
  echo "# 1. the array job (task I runs shard I/$QC_SHARDS):"
  echo "+ sbatch --parsable $(qc_quote "${QC_ARRAY_SBATCH[@]}")"
  for ((i = 1; i <= QC_SHARDS; i++)); do
    echo "#   task $i: $(qc_quote "${QC_CMD[@]}" "${QC_ARGS[@]}" --shard "$i/$QC_SHARDS")"
  done
  qc_final_sbatch ARRAYJOB
  echo "# 2. the final step, after every task succeeded (cancelled if one fails):"
  echo "+ sbatch --parsable $(qc_quote "${QC_FINAL_SBATCH[@]}")"
  echo "#   runs: $(qc_quote "${QC_CMD[@]}" "${QC_ARGS[@]}" --finalize)"
  exit 0
fi

mkdir -p "$QC_LOG_DIR" || qc_die "cannot create the log folder $QC_LOG_DIR"
qc_submit_chain "array job" "final step" qc_final_sbatch
echo "array job $QC_ARRAY_JOB: shards $QC_TASKS of $QC_SHARDS (logs $QC_LOG_DIR/shard-${QC_ARRAY_JOB}_*.out)"
echo "final job $QC_FINAL_JOB: after afterok:$QC_ARRAY_JOB (log $QC_LOG_DIR/final-$QC_FINAL_JOB.out)"
