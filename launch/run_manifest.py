"""The recipe of a run (read with :mod:`recipes.reader`), its checks and derived settings, and ``manifest.json``."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from core.io import atomic_write_json, read_json_object
from launch.run_files import RunError, now_iso
from recipes.reader import dig, load_recipe  # noqa: F401 (job and preflight import load_recipe from here)


def parse_overrides(args: list[str]) -> dict[str, str]:
    """``key=value`` command-line overrides (EasyR1/OmegaConf style) as a flat dict."""
    pairs = (a.split("=", 1) for a in args if "=" in a)
    return {k.strip(): v.strip() for k, v in pairs}


def recipe_value(recipe: dict, overrides: dict[str, str], key: str, default: Any = None) -> Any:
    if key in overrides:
        v = overrides[key]
        return None if v.lower() in ("null", "none", "~") else v
    return dig(recipe, key, default)


def plan_max_steps(recipe: dict, overrides: dict[str, str], env_max_steps: str, train_files: str) -> tuple[int, str]:
    """(max_steps, how it was found): the env setting, else the recipe's ``trainer.max_steps``, else EasyR1's own
    formula ``floor(rows / data.rollout_batch_size) * trainer.total_epochs`` on the training parquet."""
    if env_max_steps:
        return int(env_max_steps), "QUOTECITE_MAX_STEPS"
    v = recipe_value(recipe, overrides, "trainer.max_steps")
    if v not in (None, ""):
        return int(v), "recipe trainer.max_steps"
    bs = int(recipe_value(recipe, overrides, "data.rollout_batch_size", 0) or 0)
    epochs = int(recipe_value(recipe, overrides, "trainer.total_epochs", 1) or 1)
    if not train_files or "${" in train_files or not Path(train_files).is_file() or bs <= 0:
        raise RunError(
            "cannot tell max_steps: set QUOTECITE_MAX_STEPS, or trainer.max_steps in the recipe, or point "
            f"QUOTECITE_TRAIN_FILES at the training parquet (got {train_files or 'nothing'!r})"
        )
    import pyarrow.parquet as pq  # only when max_steps must be derived from the data

    rows = int(pq.read_metadata(train_files).num_rows)
    return rows // bs * epochs, f"{rows} rows // rollout_batch_size {bs} * total_epochs {epochs}"


def absolute_path_overrides(recipe: dict, overrides: dict[str, str], repo: Path) -> list[str]:
    """``key=value`` overrides: ``data.format_prompt`` and ``worker.reward.reward_function`` made absolute
    against ``repo`` (EasyR1 resolves them from its working directory and, finding nothing, trains without our
    prompt), and for our reward ``batch_groups`` and ``keep_band`` (``[filter_low, filter_high]`` under online
    filtering, else null), so it can tell which groups trained; what the user overrides is kept as given."""
    get = partial(recipe_value, recipe, overrides)
    out = []
    for key in ("data.format_prompt", "worker.reward.reward_function"):
        value = get(key)
        if not isinstance(value, str) or not value or "${" in value:
            continue
        path, sep, name = value.rpartition(":") if key.endswith("function") and ":" in value else (value, "", "")
        p = Path(path).expanduser()
        out.append(f"{key}={(p if p.is_absolute() else repo / p).resolve()}{sep}{name}")
    fn = str(get("worker.reward.reward_function") or "")
    if Path(fn.rpartition(":")[0] or fn).name == "quote_reward.py":
        kw = "worker.reward.reward_function_kwargs"
        if f"{kw}.batch_groups" not in overrides and get("data.rollout_batch_size") not in (None, ""):
            out.append(f"{kw}.batch_groups={int(get('data.rollout_batch_size'))}")
        if f"{kw}.keep_band" not in overrides:
            band = "null"  # without online filtering every group trains
            if str(get("algorithm.online_filtering", False)).lower() in ("true", "1"):
                band = f"[{float(get('algorithm.filter_low', 0.01))},{float(get('algorithm.filter_high', 0.99))}]"
            out.append(f"{kw}.keep_band={band}")
    return out


def check_recipe(recipe: dict, overrides: dict[str, str]) -> list[str]:
    """Settings that would break chaining; each is a one-line error."""
    get = partial(recipe_value, recipe, overrides)
    errors = []
    if int(get("trainer.save_freq", -1) or -1) <= 0:
        errors.append("trainer.save_freq must be > 0: a job that never saves cannot be resumed by the next one")
    if get("trainer.load_checkpoint_path") not in (None, ""):
        errors.append("trainer.load_checkpoint_path must be null: it overrides find_last_checkpoint in every job")
    if int(get("trainer.save_limit", -1) or -1) == 1:
        errors.append(
            "trainer.save_limit=1 deletes the only complete checkpoint before the next one is written "
            "(EasyR1 prunes first); use -1 or >= 2"
        )
    return errors


def git_state(repo: Path) -> dict:
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    return {"commit": commit or None, "dirty": dirty}


def update_manifest(run_dir: Path, base: dict, job: dict, allow_recipe_change: bool = False) -> dict:
    """Create ``manifest.json`` from ``base`` on the first job; append/update ``job`` (keyed by segment or job id).
    A recipe whose hash differs from the run's is an error unless ``allow_recipe_change``."""
    path = run_dir / "manifest.json"
    man = read_json_object(path, "run manifest") if path.exists() else {**base, "created_at": now_iso(), "jobs": []}
    old_sha, new_sha = dig(man, "recipe.sha256"), dig(base, "recipe.sha256")
    if old_sha and new_sha and old_sha != new_sha:
        if not allow_recipe_change:
            raise RunError(
                f"the recipe changed during the run (sha256 {old_sha[:12]} in manifest.json, now {new_sha[:12]}); "
                "restore it, start a new RUN_DIR, or set QUOTECITE_ALLOW_RECIPE_CHANGE=1"
            )
        job = {**job, "recipe_sha256": new_sha}
    jobs = {j.get("segment") or f"job {j.get('job_id')}": j for j in man.get("jobs", [])}
    key = job.get("segment") or f"job {job.get('job_id')}"
    jobs[key] = {**jobs.pop(key, {}), **job}  # updated entries move to the end
    man["jobs"] = list(jobs.values())
    for k in ("easyr1_commit", "vllm", "models", "max_steps"):
        if base.get(k) and not man.get(k):
            man[k] = base[k]
    atomic_write_json(path, man)
    return man
