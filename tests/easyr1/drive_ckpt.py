"""The checkpoint names EasyR1 b44b311 writes, read from its own code, for launch/runlog.py to compare.

    drive_ckpt.py CKPT_DIR

Writes nothing of its own naming: RayPPOTrainer._save_checkpoint runs for real (tracker file, dataloader state,
obsolete-checkpoint removal) with a worker group whose save_checkpoint writes the shard files named by
FSDPCheckpointManager's own f-strings (a real FSDP save needs GPUs: torch.cuda RNG state, NCCL). Then EasyR1's
find_latest_ckpt reads the folder back. Reports the constants, the name templates and what was written.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import report  # noqa: E402


def shard_templates() -> list[str]:
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    source = inspect.getsource(FSDPCheckpointManager.save_checkpoint)
    return re.findall(r'os\.path\.join\(path, f"([^"]+)"\)', source)


def lora_files() -> list[str]:
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    source = inspect.getsource(FSDPCheckpointManager.save_checkpoint)
    return re.findall(r'os\.path\.join\(lora_path, "([^"]+)"\)', source)


class SavingWorkers:
    """The actor worker group's save_checkpoint, writing what FSDPCheckpointManager writes per rank."""

    world_size = 2

    def save_checkpoint(self, path: str, save_model_only: bool = False) -> None:
        os.makedirs(path, exist_ok=True)
        for rank in range(self.world_size):
            for template in shard_templates():
                name = template.replace("{self.world_size}", str(self.world_size)).replace("{self.rank}", str(rank))
                Path(path, name).write_bytes(b"shard")
        lora = Path(path, "lora_adapter")
        lora.mkdir(exist_ok=True)
        for name in lora_files():
            Path(lora, name).write_bytes(b"{}")


def main() -> None:
    ckpt = sys.argv[1]
    from types import SimpleNamespace

    import torch
    from verl.trainer.ray_trainer import RayPPOTrainer
    from verl.utils.checkpoint import CHECKPOINT_TRACKER, find_latest_ckpt

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # only the attributes _save_checkpoint reads
    trainer.config = SimpleNamespace(
        trainer=SimpleNamespace(save_checkpoint_path=ckpt, save_limit=2, save_model_only=False)
    )
    trainer.actor_rollout_ref_wg = SavingWorkers()
    trainer.use_critic = False
    trainer.train_dataloader = SimpleNamespace(state_dict=lambda: {"epoch": 0, "seen": torch.tensor(4)})
    trainer.best_val_reward_score, trainer.val_reward_score, trainer.best_global_step = -1.0, 0.0, None
    for step, score in ((4, 0.3), (8, 0.1), (12, 0.2)):
        trainer.global_step, trainer.val_reward_score = step, score
        trainer._save_checkpoint()
    latest, tracker = find_latest_ckpt(ckpt)
    report(
        {
            "CHECKPOINT_TRACKER": CHECKPOINT_TRACKER,
            "shard_templates": shard_templates(),
            "lora_files": lora_files(),
            "latest": latest,
            "tracker": tracker,
            "folders": sorted(p.name for p in Path(ckpt).iterdir()),
            "files": sorted(str(p.relative_to(ckpt)) for p in Path(ckpt).rglob("*") if p.is_file()),
        }
    )


if __name__ == "__main__":
    main()
