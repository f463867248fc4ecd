"""EasyR1's trainer paths on our parquet and reward, with only generation scripted.

    drive_batch.py SPEC_JSON

SPEC: {"argv": trainer arguments (config=..., overrides), "processor_dir": folder for the tiny Qwen3-VL,
"script": [{"question", "responses"}], "validate": bool}. Mirrors verl/trainer/main.py and Runner.run: the config
loader, get_tokenizer/get_processor, AutoRewardManager as two Ray actors (train, val) with the recipe's reward,
create_dataloader, RayPPOTrainer; then one step's data path of RayPPOTrainer.fit: _make_batch_data (online
filtering), _balance_batch, compute_advantage, _validate, and the Tracker of trainer.logger. Reports what trained.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ScriptedRollout, load_config, report, start_local_ray, write_tiny_qwen3vl  # noqa: E402


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    write_tiny_qwen3vl(spec["processor_dir"])
    config = load_config(spec["argv"] + [f"worker.actor.model.model_path={spec['processor_dir']}"])

    import numpy as np
    import ray
    import torch
    from verl.single_controller.ray import RayWorkerGroup
    from verl.trainer.data_loader import create_dataloader
    from verl.trainer.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role, compute_advantage
    from verl.utils.logger import Tracker
    from verl.utils.tokenizer import get_processor, get_tokenizer
    from verl.workers.fsdp_workers import FSDPWorker
    from verl.workers.reward import AutoRewardManager

    from data_prep.groundtruth import unpack_ground_truth
    from reward.samples import install_wandb_samples
    from reward.train import patch_ray_init

    patch_ray_init()  # what `python -m reward.train` does before EasyR1's main calls ray.init
    start_local_ray()
    out: dict = {"ok": True}
    # Runner.run, as far as it goes without GPUs
    tokenizer = get_tokenizer(
        config.worker.actor.model.model_path,
        override_chat_template=config.data.override_chat_template,
        trust_remote_code=config.worker.actor.model.trust_remote_code,
        use_fast=True,
    )
    processor = get_processor(
        config.worker.actor.model.model_path,
        override_chat_template=config.data.override_chat_template,
        trust_remote_code=config.worker.actor.model.trust_remote_code,
        use_fast=True,
    )
    role_worker_mapping = {Role.ActorRolloutRef: ray.remote(FSDPWorker), Role.Critic: ray.remote(FSDPWorker)}
    resource_pool_spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    mapping = {Role.ActorRolloutRef: "global_pool", Role.Critic: "global_pool"}
    resource_pool_manager = ResourcePoolManager(resource_pool_spec=resource_pool_spec, mapping=mapping)
    RemoteRewardManager = ray.remote(AutoRewardManager).options(num_cpus=config.worker.reward.num_cpus)
    reward_fn = RemoteRewardManager.remote(config.worker.reward, tokenizer)
    val_reward_fn = RemoteRewardManager.remote(config.worker.reward, tokenizer)

    def wandb_logger_class(_actor) -> str:
        from verl.utils.logger.logger import LOGGERS

        return LOGGERS["wandb"].__name__

    # the worker set-up hook ran in EasyR1's own actors, as in the Runner actor that owns the wandb run on a cluster
    out["wandb_logger_in_reward_actor"] = ray.get(reward_fn.__ray_call__.remote(wandb_logger_class))
    # this process holds the Tracker (the Runner's part here): the hook's function, run in it too
    out["hook_installed_here"] = install_wandb_samples()
    train_dataloader, val_dataloader = create_dataloader(config.data, tokenizer, processor)
    out["dataset"] = []  # what RLHFDataset makes of each row: its image tokens as the model will see them
    for split, loader in (("train", train_dataloader), ("val", val_dataloader)):
        for i in range(len(loader.dataset)):
            item = loader.dataset[i]
            ids = item["input_ids"][item["attention_mask"].bool()]
            out["dataset"].append(
                {
                    "split": split,
                    "qid": unpack_ground_truth(item["ground_truth"]).qid,
                    "image_pad": int((ids == processor.image_token_id).sum()),
                    "vision_start": int((ids == processor.vision_start_token_id).sum()),
                    "n_images": len(item["multi_modal_data"]["images"]),
                    "prompt_tokens": int(ids.numel()),
                    "position_ids_shape": list(item["position_ids"].shape),
                }
            )
    trainer = RayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        processor=processor,
        train_dataloader=train_dataloader,
        val_dataloader=val_dataloader,
        role_worker_mapping=role_worker_mapping,
        resource_pool_manager=resource_pool_manager,
        ray_worker_group_cls=RayWorkerGroup,
        reward_fn=reward_fn,
        val_reward_fn=val_reward_fn,
    )
    # init_workers() would start the FSDP/vLLM workers; the scripted rollout takes their place for generation
    rollout = ScriptedRollout(
        tokenizer,
        spec["script"],
        n=config.worker.rollout.n,
        response_length=config.data.max_response_length,
        world_size=config.trainer.n_gpus_per_node * config.trainer.nnodes,
    )
    trainer.actor_rollout_ref_wg = rollout
    # fit(), step 1, without the actor's forward passes and updates (they need GPUs)
    trainer.logger = Tracker(loggers=config.trainer.logger, config=config.to_dict())
    trainer.global_step = 1
    trainer.data_iterator = iter(trainer.train_dataloader)
    metrics: dict = {}
    try:
        batch = trainer._make_batch_data(metrics=metrics)
    except Exception as e:
        text = str(e)
        out.update(ok=False, error_type=type(e).__name__, error_last_line=text.strip().splitlines()[-1], error=text)
        out["generate_calls"] = rollout.calls
        traceback.print_exc()
        _close(trainer)
        report(out)
        return
    trainer._balance_batch(batch, metrics=metrics)
    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]  # use_kl_loss: no KL in the reward
    batch = compute_advantage(
        batch,
        adv_estimator=config.algorithm.adv_estimator,
        gamma=config.algorithm.gamma,
        lam=config.algorithm.lam,
    )
    rows = []
    for i in range(len(batch)):
        mask = batch.batch["response_mask"][i].bool()
        resp = batch.batch["responses"][i][mask]
        rows.append(
            {
                "qid": unpack_ground_truth(batch.non_tensor_batch["ground_truth"][i]).qid,
                "uid": str(batch.non_tensor_batch["uid"][i]),
                "response": tokenizer.decode(resp, skip_special_tokens=True),
                "score": float(batch.batch["token_level_scores"][i].sum()),
                "advantage": float(batch.batch["advantages"][i][mask][0]),
                "advantage_constant": bool(
                    torch.allclose(batch.batch["advantages"][i][mask], batch.batch["advantages"][i][mask][0])
                ),
            }
        )
    out["rows"] = rows
    out["generate_calls"] = list(rollout.calls)
    if spec.get("validate", True):
        val_metrics = trainer._validate()
        metrics.update(val_metrics)
        out["val_metrics"] = val_metrics
    trainer.logger.log(data=metrics, step=trainer.global_step)
    out["metrics"] = {
        k: (float(v) if isinstance(v, (int, float, np.floating)) else str(v)) for k, v in metrics.items()
    }
    _close(trainer)
    report(out)


def _close(trainer) -> None:
    """Finish the loggers and Ray now, as the trainer's process would at its end: a wandb run left to
    ``Tracker.__del__`` at interpreter exit waits forever on its already stopped service."""
    import ray

    for logger in trainer.logger.loggers:
        logger.finish()
    trainer.logger.loggers = []
    ray.shutdown()


if __name__ == "__main__":
    main()
