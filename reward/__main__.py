"""``python -m reward COMMAND``: re-score logged rollouts with the training reward."""

import sys

from core.cli import main

COMMANDS = {
    "score": ("reward.cmd_score", "score EasyR1 reward inputs (JSONL) and write rewards with their citations"),
    "check": ("reward.cmd_check", "check a training set against the block cache and the servers before a run starts"),
}

if __name__ == "__main__":
    sys.exit(main("python -m reward", __doc__, COMMANDS))
