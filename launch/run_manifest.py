"""What a run is made of: the recipe (read with :mod:`recipes.reader`), its checks and derived settings, and
``manifest.json``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from core.io import read_json_object
from launch.run_files import RunError, atomic_write_json, now_iso
from recipes.reader import RecipeError, dig
from recipes.reader import load_recipe as read_recipe_file


# --------------------------------------------------------------------------------------------- recipe
def load_recipe(path: Path) -> dict:
    """The recipe YAML as a dict (``${oc.env:...}`` interpolations are left as text): the one reader,
    :func:`recipes.reader.load_recipe`."""
    try:
        return read_recipe_file(path)
    except RecipeError as e:
        raise RunError(str(e)) from None


def parse_overrides(args: list[str]) -> dict[str, str]:
    """``key=value`` command-line overrides (EasyR1/OmegaConf style) as a flat dict."""
    out = {}
    for a in args:
        if "=" in a:
            k, v = a.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def recipe_value(recipe: dict, overrides: dict[str, str], key: str, default: Any = None) -> Any:
    if key in overrides:
        v = overrides[key]
        return None if v.lower() in ("null", "none", "~") else v
    return dig(recipe, key, default)


def count_parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq  # only when max_steps must be derived from the data

    return int(pq.read_metadata(path).num_rows)


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
    rows = count_parquet_rows(Path(train_files))
    return rows // bs * epochs, f"{rows} rows // rollout_batch_size {bs} * total_epochs {epochs}"


def absolute_path_overrides(recipe: dict, overrides: dict[str, str], repo: Path) -> dict[str, str]:
    """The trainer overrides that pin the recipe's relative paths and tell the reward its batch shape.

    ``data.format_prompt`` and ``worker.reward.reward_function`` as absolute paths (a relative one is resolved from
    ``repo``, where the recipe says they are relative to): EasyR1 resolves them from its working directory and,
    when nothing is there, prints "not found" and trains without our prompt (or, for the reward, fails late).
    With our reward plugin, also ``worker.reward.reward_function_kwargs.batch_groups`` (``data.rollout_batch_size``)
    and ``keep_band`` (``[filter_low, filter_high]`` under online filtering, else null), so the reward can tell which
    groups trained (``reward.pipeline.TrainBatchTracker``). Keys ``batch_groups``/``keep_band`` hold full
    ``key=value`` strings like the paths; a value the user already overrides is kept as given."""
    out: dict[str, str] = {}
    for key in ("data.format_prompt", "worker.reward.reward_function"):
        value = recipe_value(recipe, overrides, key)
        if not isinstance(value, str) or not value or "${" in value:
            continue
        path, sep, name = (
            value.rpartition(":") if key.endswith("reward_function") and ":" in value else (value, "", "")
        )
        p = Path(path).expanduser()
        out[key] = f"{key}={(p if p.is_absolute() else repo / p).resolve()}{sep}{name}"
    fn = str(recipe_value(recipe, overrides, "worker.reward.reward_function", "") or "")
    if Path(fn.rpartition(":")[0] if ":" in fn else fn).name == "quote_reward.py":
        kw = "worker.reward.reward_function_kwargs"
        if f"{kw}.batch_groups" not in overrides:
            groups = recipe_value(recipe, overrides, "data.rollout_batch_size")
            if groups not in (None, ""):
                out["batch_groups"] = f"{kw}.batch_groups={int(groups)}"
        if f"{kw}.keep_band" not in overrides:
            on = str(recipe_value(recipe, overrides, "algorithm.online_filtering", False)).lower() in ("true", "1")
            low = recipe_value(recipe, overrides, "algorithm.filter_low", 0.01)
            high = recipe_value(recipe, overrides, "algorithm.filter_high", 0.99)
            out["keep_band"] = f"{kw}.keep_band=" + (f"[{float(low)},{float(high)}]" if on else "null")
    return out


def check_recipe(recipe: dict, overrides: dict[str, str]) -> list[str]:
    """Settings that would break chaining; each is a one-line error."""
    errors = []
    save_freq = int(recipe_value(recipe, overrides, "trainer.save_freq", -1) or -1)
    if save_freq <= 0:
        errors.append("trainer.save_freq must be > 0: a job that never saves cannot be resumed by the next one")
    if recipe_value(recipe, overrides, "trainer.load_checkpoint_path") not in (None, ""):
        errors.append("trainer.load_checkpoint_path must be null: it overrides find_last_checkpoint in every job")
    save_limit = int(recipe_value(recipe, overrides, "trainer.save_limit", -1) or -1)
    if save_limit == 1:
        errors.append(
            "trainer.save_limit=1 deletes the only complete checkpoint before the next one is written "
            "(EasyR1 prunes first); use -1 or >= 2"
        )
    return errors


# --------------------------------------------------------------------------------------------- manifest
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
    key = job.get("segment") or f"job {job.get('job_id')}"
    jobs = [j for j in man.get("jobs", []) if (j.get("segment") or f"job {j.get('job_id')}") != key]
    old = next((j for j in man.get("jobs", []) if (j.get("segment") or f"job {j.get('job_id')}") == key), {})
    jobs.append({**old, **job})
    man["jobs"] = jobs
    for k in ("easyr1_commit", "vllm", "models", "max_steps"):
        if base.get(k) and not man.get(k):
            man[k] = base[k]
    atomic_write_json(path, man)
    return man
