# shellcheck shell=bash disable=SC2034  # sourced: the variables it sets are read by the launch scripts
# The GPU software of a training/evaluation job: found, never installed. The set-up step builds it beforehand, on a
# login node or as a CPU job (it needs PyPI and a git host; a job needs neither):
#
#   python -m launch.setup setup          # the trainer venv (slurm/trainer.lock + EasyR1) and the server venv (vLLM)
#   python -m launch.setup fetch-models   # the judge, embedder and policy weights into the jobs' HF_HOME
#   python -m launch.setup status         # what is there, what is missing
#
# launch/setup.py is the one source of the folder names, the stamp file and the versions (its docstring describes the
# two venvs); this file asks it (`python -m launch.setup shell`) and sets, when sourced:
#   QC_EASYR1_REPO, QC_EASYR1_COMMIT, QC_TRAINER_LOCK, QC_VLLM_SERVER, QC_FLASH_ATTN, QC_VLLM_TRAINER,
#   QC_TORCH_TRAINER (the lock's pins), QC_PROJECT_DEPS (array; `make easyr1` reads it), QC_TRAINER_ENV,
#   QC_SERVER_ENV, QC_TRAINER_PY, QC_SERVER_PY, QC_SERVER_VLLM, QC_ENV_STAMP (the stamp's name), QC_HF_HOME;
#   qc_trainer_pip_args (tests/easyr1/test_lock.py).
# After qc_env_setup: QC_EASYR1_COMMIT_FULL, QC_VLLM_TRAINER_VERSION, QC_VLLM_SERVER_VERSION (from the stamps), and
# HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1 exported for every process of the job; a venv or a
# model that is missing stops the job at once with the command that makes it (the dry run lists them instead).
# Settings: those of launch/setup.py (QUOTECITE_ENV_ROOT, QUOTECITE_HF_HOME, QUOTECITE_MODELS_CHECK, ...);
# QUOTECITE_PYTHON / the project's .venv / python3 runs it.

# qc_setup_py ARGS...: python -m launch.setup ARGS with the project's python (QUOTECITE_PYTHON, .venv, python3).
qc_setup_py() {
  local py=${QUOTECITE_PYTHON:-}
  [[ -z $py && -x ${QC_REPO:?}/.venv/bin/python ]] && py=$QC_REPO/.venv/bin/python
  PYTHONPATH="$QC_REPO${PYTHONPATH:+:$PYTHONPATH}" "${py:-python3}" -m launch.setup "$@"
}

if ! QC_SETUP_VARS=$(qc_setup_py shell); then
  echo "error: slurm/env.sh: \`python -m launch.setup shell\` failed (see above)" >&2
  return 1 2>/dev/null || exit 1
fi
eval "$QC_SETUP_VARS"

# qc_lock_pin NAME: the version slurm/trainer.lock pins for NAME (empty if none).
qc_lock_pin() {
  sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$QC_TRAINER_LOCK"
}

# qc_trainer_pip_args: the arguments of the trainer's one resolving `pip install` (one a line), as the set-up runs
# it. The lock test runs pip with exactly these (plus --dry-run --report - --ignore-installed).
qc_trainer_pip_args() {
  printf '%s\n' -r "$QC_TRAINER_LOCK"
}

# qc_env_dirs: the folders (kept for callers of the old interface; sourcing already sets them).
qc_env_dirs() {
  eval "$QC_SETUP_VARS"
}

# qc_env_setup: check the environments and models (launch/setup.py's readiness), export the job's HF settings and
# set the versions for the manifest. A job stops here, within seconds, when something is missing.
qc_env_setup() {
  local check line
  check=$(qc_setup_py shell --check) || qc_die "python -m launch.setup shell --check failed"
  eval "$check"
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    echo "# set-up (python -m launch.setup status):"
    while IFS= read -r line; do echo "# $line"; done <<<"$QC_SETUP_TABLE"
    for line in "${QC_SETUP_MISSING[@]}"; do echo "# missing: $line"; done
    if [[ ! -f $QC_TRAINER_ENV/$QC_ENV_STAMP || ! -f $QC_SERVER_ENV/$QC_ENV_STAMP ]]; then
      echo "#   what \`python -m launch.setup setup\` installs:"
      qc_setup_py setup --dry-run | sed -n 's/^  \[/#     [/p'
    fi
    printf '# every process runs with %s\n' "${QC_JOB_EXPORTS[*]}"
    return 0
  fi
  if ((${#QC_SETUP_MISSING[@]})); then
    for line in "${QC_SETUP_MISSING[@]}"; do qc_log "missing: $line"; done
    qc_die "the set-up is incomplete (${#QC_SETUP_MISSING[@]} missing, above); jobs never install or download: run the commands above on a login node (or as a CPU job), then resubmit"
  fi
  export "${QC_JOB_EXPORTS[@]}"
}
