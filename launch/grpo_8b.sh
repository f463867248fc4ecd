#!/usr/bin/env bash
#SBATCH --job-name=quotecite-grpo-8b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=3
#SBATCH --cpus-per-task=32
#SBATCH --mem=165G
#SBATCH --time=08:00:00
#SBATCH --signal=B:USR1@3600
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --output=%x-%j.out
# GRPO training of Qwen3-VL-8B with the quote-and-retrieve reward, as a chain of Slurm jobs (launch/job.py).
#
#   python -m launch.setup setup && python -m launch.setup fetch-models   # once, on a login node: venvs, weights
#   sbatch launch/grpo_8b.sh [key=value ...]                 # from the repository root; args: EasyR1 overrides
#   bash launch/grpo_8b.sh --dry-run [key=value ...]          # every step of this job, printed; runs nothing
#   sbatch launch/grpo_8b.sh --smoke                          # first GPU day: 2 steps, eval infer, measured vs budget
#
# --mem: `python -m launch.budget memory --recipe recipes/qwen3vl_8b_grpo.yaml data.val_batch_size=32` (rank 0 loads
# the policy in fp32 on the CPU, vLLM's sleep mode keeps bf16 weights in host memory, checkpoint staging, image
# tensors, vLLM's queued images, both servers; the job bounds the recipe's val_batch_size -1 to the rollout batch).
# A job that ends before max_steps requeues itself (scontrol requeue: same job id, every sbatch option you gave; hence
# --requeue and --open-mode=append); the rest is in launch/job.py's docstring and docs/cluster.md.
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
exec "$QC_PY" -m launch.job "$@"
