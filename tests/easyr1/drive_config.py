"""Load a recipe with EasyR1's own config classes, the way verl/trainer/main.py does (tests/easyr1/harness.py).

    drive_config.py CASES_JSON    # [{"argv": ["config=recipe.yaml", "k=v", ...], "unset": ["ENV_VAR", ...]}, ...]

For each case (in this one process: EasyR1 is imported once), reports the resolved config (PPOConfig.to_dict())
and the reward settings as the reward plugin reads them, or the error EasyR1 raised, by class and message. Also
reports EasyR1's key schema and the versions of omegaconf and transformers.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import load_config, report, schema_keys  # noqa: E402


def load_case(case: dict) -> dict:
    saved = {k: os.environ.pop(k) for k in case.get("unset", []) if k in os.environ}
    try:
        config = load_config(case["argv"])
    except Exception as e:  # reported: the test says which error it expects
        return {"ok": False, "error_type": type(e).__name__, "error": str(e)}
    finally:
        os.environ.update(saved)
    out = {"ok": True, "config": config.to_dict()}
    from reward.config import RewardConfig

    try:
        reward = RewardConfig.from_kwargs(**config.worker.reward.reward_function_kwargs)
        out["reward_config"] = {k: getattr(reward, k) for k in ("judge", "judge_url", "cache_dir", "reward_form")}
    except Exception as e:
        out["reward_config_error"] = f"{type(e).__name__}: {e}"
    return out


def main() -> None:
    cases = json.loads(sys.argv[1])
    from verl.trainer.config import PPOConfig

    out = {
        "omegaconf": version("omegaconf"),
        "transformers": version("transformers"),
        "schema": schema_keys(PPOConfig()),
        "cases": [load_case(c) for c in cases],
    }
    report(out)


if __name__ == "__main__":
    main()
