"""``python -m reward COMMAND``: re-score logged rollouts with the training reward."""

import sys

from core.cli import main

COMMANDS = {
    "score": ("reward.cmd_score", "score EasyR1 reward inputs (JSONL) and write rewards with their citations"),
    "check": ("reward.cmd_check", "check a training set against the block cache and the servers before a run starts"),
    "trl-train": (
        "reward.trl_train",
        "GRPO with the quote reward on TRL (a tiny policy on a CPU, Qwen3-VL-8B on GPUs)",
    ),
}

if __name__ == "__main__":
    sys.exit(main("python -m reward", __doc__, COMMANDS))
