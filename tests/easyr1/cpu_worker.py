"""A CPU stand-in for EasyR1 b44b311's ``FSDPWorker`` (``verl/workers/fsdp_workers.py``), for the easyr1 tier only.

``RayPPOTrainer`` takes its worker class from ``role_worker_mapping`` and only ever calls the worker's ``@register``ed
methods through a ``RayWorkerGroup``; :class:`CPUWorker` registers the same methods with the same dispatch modes, so
``RayPPOTrainer.init_workers`` / ``fit`` (resource pools, colocated ``WorkerDict``, dispatch and collection) run
unchanged on a Ray started with ``num_gpus`` equal to the trainer's GPUs. The policy is a tiny random Qwen3-VL with
the recipe's peft LoRA; log-probs and the update are EasyR1's own ``DataParallelPPOActor`` (its policy loss, KL loss,
loss averaging, grad clipping); the multimodal inputs are made by ``FSDPWorker._process_multi_modal_inputs`` itself.

What differs from the GPU worker, exactly:

- process group: ``gloo`` on CPU (the GPU worker: NCCL); no device mesh, no FSDP wrapping, no Ulysses mesh
  (``FSDPUlyssesShardingManager(None)``, as with ``ulysses_size`` 1); the worker group's world size is whatever the
  Ray pool gives (the tests use 1). ``Worker.__init__`` asks ``torch.cuda.get_device_name()`` (an AMD check), which
  fails without a GPU: :class:`CPUWorkerBase` configures the same ``WorkerMeta`` from the same variables without it.
- the model: fp32 everywhere and ``sdpa`` attention (the GPU worker: flash-attention 2, frozen weights cast to bf16,
  FSDP mixed precision bf16), so ``padding_free`` must be false; AdamW unfused.
- rollout: Hugging Face ``generate`` on the training weights, one prompt at a time with ``num_return_sequences=n``
  (the GPU worker: vLLM with the LoRA synced by ``FSDPVLLMShardingManager`` and sleep mode between phases);
  ``prepare_rollout_engine`` / ``release_rollout_engine`` have nothing to load or offload. A random tiny policy never
  writes a parseable answer, so when ``$CPU_WORKER_CANDIDATES`` names a JSON list of ``{"question", "responses"}``,
  the sampling of a prompt containing ``question`` is constrained (``prefix_allowed_tokens_fn``) to those responses:
  the model's own probabilities choose among them token by token. Without it (or for another prompt) it samples
  freely. Sampling is seeded per call (reproducible runs). The prompt given to ``generate`` is the dataset's
  ``input_ids`` (image pads already expanded by the processor) with the images of ``multi_modal_data`` through
  ``process_image`` and the image processor; vLLM gets ``raw_prompt_ids`` and expands them itself.
- checkpoints: written in EasyR1's layout (``model_world_size_{W}_rank_{R}.pt``, ``optim_...``,
  ``extra_state_...`` with the lr scheduler and the CPU/numpy/python RNG states, ``huggingface/``, and
  ``lora_adapter/{adapter_model.safetensors, adapter_config.json}`` as ``FSDPCheckpointManager`` writes them), from
  plain state dicts instead of ``torch.distributed.checkpoint`` sharded ones; the CUDA RNG state is absent.
- metrics: no ``perf/mfu_actor`` or GPU memory metrics (FlopsCounter asks CUDA for the device); no critic
  (``compute_values`` / ``update_critic`` raise: the recipe is GRPO).
- ``$CPU_WORKER_LOG`` (optional): one JSON line per event (init, generate, update, save, load with the check that
  the adapter in the model equals the saved ``adapter_model.safetensors``), for the tests to read.
- ``$CPU_WORKER_GATE`` (optional, for the local-Slurm chain tests): a file holding an integer K; every
  ``generate_sequences`` (training and validation) waits, polling, until K >= the step it generates for, i.e. the
  checkpoint step it resumed from plus the updates it made plus 1 (the stand-in trainer's
  ``QUOTECITE_STANDIN_GATE``, on the real loop). So a test decides where a job stands when it requeues it or takes a
  server away, whatever the machine's speed.
"""

from __future__ import annotations

import json
import os
import random
import time
from contextlib import nullcontext
from dataclasses import asdict

import numpy as np
import torch
import torch.distributed as dist
from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register
from verl.single_controller.base.worker import WorkerMeta
from verl.workers.fsdp_workers import FSDPWorker

CANDIDATES_ENV = "CPU_WORKER_CANDIDATES"
LOG_ENV = "CPU_WORKER_LOG"
GATE_ENV = "CPU_WORKER_GATE"
GEN_SEED = 1234


def registered_methods(cls) -> dict[str, dict]:
    """``{name: {"dispatch_mode", "execute_mode", "blocking"}}`` of the ``@register``ed methods of ``cls``."""
    out = {}
    for name in dir(cls):
        attrs = getattr(getattr(cls, name, None), MAGIC_ATTR, None)
        if attrs is not None:
            out[name] = {k: str(v) for k, v in attrs.items() if k in ("dispatch_mode", "execute_mode", "blocking")}
    return out


class CPUWorkerBase(Worker):
    """``Worker`` whose ``__init__`` makes the same ``WorkerMeta`` from the variables the worker group sets,
    without ``torch.cuda.get_device_name()``. The colocated ``WorkerDict`` derives from this class."""

    def __init__(self, cuda_visible_devices=None) -> None:
        store = {
            "_world_size": int(os.environ["WORLD_SIZE"]),
            "_rank": int(os.environ["RANK"]),
            "_local_world_size": int(os.getenv("LOCAL_WORLD_SIZE", "1")),
            "_local_rank": int(os.getenv("LOCAL_RANK", "0")),
            "_master_addr": os.getenv("MASTER_ADDR"),
            "_master_port": os.getenv("MASTER_PORT"),
        }
        if cuda_visible_devices is not None:
            store["_cuda_visible_devices"] = cuda_visible_devices
        self._configure_with_meta(meta=WorkerMeta(store=store))


def _log(event: str, **data) -> None:
    path = os.getenv(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "time": round(time.time(), 3), **data}, default=str) + "\n")


def rollout_output(prompts: DataProto, response_ids: list[list[int]], n: int, pad_token_id: int,
                   eos_token_id: int, response_length: int) -> DataProto:  # fmt: skip
    """The DataProto ``vLLMRollout.generate_sequences`` builds from the sampled ids (``response_ids``: n per prompt,
    each ending with EOS when it finished), with EasyR1's own helpers."""
    from tensordict import TensorDict
    from verl.utils import torch_functional as VF
    from verl.workers.rollout.vllm_rollout_spmd import _repeat_interleave

    input_ids = prompts.batch["input_ids"]
    attention_mask = prompts.batch["attention_mask"]
    position_ids = prompts.batch["position_ids"]
    batch_size = input_ids.size(0)
    mm = prompts.non_tensor_batch.get("multi_modal_data")
    responses = VF.pad_2d_list_to_length(response_ids, pad_token_id, max_length=response_length)
    if n > 1:
        batch_size *= n
        input_ids = _repeat_interleave(input_ids, n)
        attention_mask = _repeat_interleave(attention_mask, n)
        position_ids = _repeat_interleave(position_ids, n)
        if mm is not None:
            mm = _repeat_interleave(mm, n)
    sequence_ids = torch.cat([input_ids, responses], dim=-1)
    length = responses.size(1)
    delta = torch.arange(1, length + 1).view(1, -1).expand(batch_size, -1)
    if position_ids.ndim == 3:  # qwen-vl mrope: (batch_size, 4, seq_length)
        delta = delta.view(batch_size, 1, -1).expand(batch_size, position_ids.size(1), -1)
    position_ids = torch.cat([position_ids, position_ids[..., -1:] + delta], dim=-1)
    response_mask = VF.get_response_mask(response_ids=responses, eos_token_id=eos_token_id, dtype=attention_mask.dtype)
    attention_mask = torch.cat((attention_mask, response_mask), dim=-1)
    batch = TensorDict(
        {
            "prompts": input_ids,
            "responses": responses,
            "input_ids": sequence_ids,
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "position_ids": position_ids,
        },
        batch_size=batch_size,
    )
    return DataProto(batch=batch, non_tensor_batch={"multi_modal_data": mm} if mm is not None else {},
                     meta_info=prompts.meta_info)  # fmt: skip


class _Trie:
    """Allowed next tokens of a set of token sequences, given a prefix."""

    def __init__(self, sequences: list[list[int]], end: int) -> None:
        self.sequences = sequences
        self.end = end

    def next_tokens(self, prefix: list[int]) -> list[int]:
        k = len(prefix)
        allowed = {s[k] for s in self.sequences if len(s) > k and s[:k] == prefix}
        return sorted(allowed) or [self.end]


class CPUWorker(CPUWorkerBase):
    """The actor/rollout/ref worker of the recipe on CPU (module docstring: what differs from ``FSDPWorker``)."""

    _process_multi_modal_inputs = FSDPWorker._process_multi_modal_inputs  # EasyR1's own, unchanged

    def __init__(self, config, role: str):
        super().__init__()
        self.config = config
        self.role = role
        self._cache = {}
        if not dist.is_initialized():
            dist.init_process_group(backend="gloo")
        self._has_actor = role in ["actor", "actor_rollout", "actor_rollout_ref"]
        self._has_rollout = role in ["rollout", "actor_rollout", "actor_rollout_ref"]
        self._has_ref = role in ["ref", "actor_rollout_ref"] and not config.actor.disable_kl
        if role == "critic":
            raise NotImplementedError("the CPU worker has no critic (the recipe is GRPO)")
        self._lora_rank = config.actor.model.lora.rank
        self._is_lora = self._lora_rank > 0
        self._gen_calls = 0
        self._resumed_step = self._updates = 0  # the step gate's count ($CPU_WORKER_GATE)
        if self._has_actor:  # FSDPWorker._init_dist_mesh's batch-size normalisation, without the meshes
            from verl.workers.sharding_manager.fsdp_ulysses import FSDPUlyssesShardingManager

            actor = config.actor
            if actor.ulysses_size != 1:
                raise ValueError("the CPU worker has no Ulysses sequence parallelism: worker.actor.ulysses_size=1")
            if actor.padding_free:
                raise ValueError("the CPU worker needs worker.actor.padding_free=false (padding-free is flash-attn)")
            self.ulysses_sharding_manager = FSDPUlyssesShardingManager(None)
            if config.rollout.n > 1:
                actor.global_batch_size *= config.rollout.n
            actor.global_batch_size_per_device = actor.global_batch_size // self.world_size
            if actor.global_batch_size_per_device == 0:
                raise ValueError("actor global batch size * ulysses size must be larger than num gpus.")
            if actor.global_batch_size_per_device % actor.micro_batch_size_per_device_for_update != 0:
                raise ValueError("actor global batch size per device must be divisible by the micro batch size.")

    # ------------------------------------------------------------------------------------------------ model
    def _build(self) -> None:
        import peft
        from peft import TaskType, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig
        from verl.utils.tokenizer import get_processor, get_tokenizer
        from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

        mc = self.config.actor.model
        self.tokenizer = get_tokenizer(mc.tokenizer_path, trust_remote_code=mc.trust_remote_code, use_fast=True)
        self.processor = get_processor(mc.tokenizer_path, trust_remote_code=mc.trust_remote_code, use_fast=True)
        self.model_config = AutoConfig.from_pretrained(
            mc.model_path,
            trust_remote_code=mc.trust_remote_code,
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            **mc.override_config,
        )
        try:
            self.generation_config = GenerationConfig.from_pretrained(mc.model_path)
        except Exception:
            self.generation_config = GenerationConfig.from_model_config(self.model_config)
        if type(self.model_config) in AutoModelForImageTextToText._model_mapping.keys():
            auto = AutoModelForImageTextToText
        else:
            auto = AutoModelForCausalLM
        model = auto.from_pretrained(mc.model_path, config=self.model_config, torch_dtype=torch.float32,
                                     attn_implementation="sdpa", trust_remote_code=mc.trust_remote_code)  # fmt: skip
        model.tie_weights()
        if self._is_lora:  # the worker's own LoraConfig call
            model.enable_input_require_grads()
            if mc.lora.target_modules == "all-linear":
                target_modules = mc.lora.target_modules
            else:
                target_modules = [item.strip() for item in mc.lora.target_modules.split(",") if item.strip()]
            lora_config = peft.LoraConfig(
                task_type=TaskType.CAUSAL_LM,
                r=mc.lora.rank,
                lora_alpha=mc.lora.alpha,
                target_modules=target_modules,
                exclude_modules=mc.lora.exclude_modules,
            )
            model = get_peft_model(model, lora_config)
        if mc.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mc.freeze_vision_tower:
            if hasattr(model, "model") and hasattr(model.model, "visual"):
                model.model.visual.requires_grad_(False)
            elif hasattr(model, "visual"):
                model.visual.requires_grad_(False)
        self.module = model
        optim = self.config.actor.optim
        if optim.strategy != "adamw":
            raise NotImplementedError(f"the CPU worker has AdamW only, not {optim.strategy}")
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=optim.lr,
            betas=optim.betas,
            weight_decay=optim.weight_decay,
        )
        if optim.lr_warmup_steps is not None:
            warmup = optim.lr_warmup_steps
        else:
            warmup = int(optim.lr_warmup_ratio * optim.training_steps)
        if optim.lr_scheduler_type == "constant":
            self.lr_scheduler = get_constant_schedule_with_warmup(optimizer=self.optimizer, num_warmup_steps=warmup)
        elif optim.lr_scheduler_type == "cosine":
            self.lr_scheduler = get_cosine_schedule_with_warmup(
                optimizer=self.optimizer,
                num_warmup_steps=warmup,
                num_training_steps=optim.training_steps,
                min_lr_ratio=optim.min_lr_ratio,
                num_cycles=0.5,
            )
        else:
            raise NotImplementedError(f"LR scheduler type {optim.lr_scheduler_type} is not supported")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        torch.manual_seed(0)
        self._build()
        self.actor = DataParallelPPOActor(config=self.config.actor, actor_module=self.module,
                                          actor_optimizer=self.optimizer)  # fmt: skip
        if self._has_ref:
            if not self._is_lora:
                raise NotImplementedError("the CPU worker's reference policy is the LoRA model without its adapter")
            self.ref_policy = DataParallelPPOActor(config=self.config.ref, actor_module=self.module)
        _log("init_model", rank=self.rank, world_size=self.world_size, lora=self._is_lora,
             trainable=sum(p.numel() for p in self.module.parameters() if p.requires_grad))  # fmt: skip

    # ------------------------------------------------------------------------------------------ checkpoints
    def _names(self, path: str) -> tuple[str, str, str]:
        w, r = self.world_size, self.rank
        return tuple(
            os.path.join(path, f"{kind}_world_size_{w}_rank_{r}.pt") for kind in ("model", "optim", "extra_state")
        )

    def _lora_weights(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(self.module).items()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str, save_model_only: bool = False):
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        dist.barrier()
        model_path, optim_path, extra_path = self._names(path)
        torch.save(self.module.state_dict(), model_path)
        if not save_model_only:
            torch.save(self.optimizer.state_dict(), optim_path)
            rng = {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
            torch.save({"lr_scheduler": self.lr_scheduler.state_dict(), "rng": rng}, extra_path)
        dist.barrier()
        if self.rank == 0:
            hf_path = os.path.join(path, "huggingface")
            os.makedirs(hf_path, exist_ok=True)
            self.module.config.save_pretrained(hf_path)
            self.module.generation_config.save_pretrained(hf_path)
            self.processor.save_pretrained(hf_path)
            if self._is_lora:  # as FSDPCheckpointManager writes it
                lora_path = os.path.join(path, "lora_adapter")
                os.makedirs(lora_path, exist_ok=True)
                peft_config = asdict(self.module.peft_config["default"])
                peft_config["task_type"] = peft_config["task_type"].value
                peft_config["peft_type"] = peft_config["peft_type"].value
                peft_config["target_modules"] = list(peft_config["target_modules"])
                save_file(self._lora_weights(), os.path.join(lora_path, "adapter_model.safetensors"))
                with open(os.path.join(lora_path, "adapter_config.json"), "w", encoding="utf-8") as f:
                    json.dump(peft_config, f, ensure_ascii=False, indent=4)
        dist.barrier()
        _log("save_checkpoint", path=path, save_model_only=save_model_only)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str):
        from safetensors.torch import load_file

        model_path, optim_path, extra_path = self._names(path)
        self.module.load_state_dict(torch.load(model_path, weights_only=False))
        self.optimizer.load_state_dict(torch.load(optim_path, weights_only=False))
        extra = torch.load(extra_path, weights_only=False)
        self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        if "rng" in extra:
            torch.set_rng_state(extra["rng"]["cpu"])
            np.random.set_state(extra["rng"]["numpy"])
            random.setstate(extra["rng"]["random"])
        dist.barrier()
        check = {}
        adapter = os.path.join(path, "lora_adapter", "adapter_model.safetensors")
        if self._is_lora and os.path.exists(adapter):
            saved, now = load_file(adapter), self._lora_weights()
            check = {
                "adapter_tensors": len(saved),
                "adapter_equal": saved.keys() == now.keys() and all(torch.equal(saved[k], now[k]) for k in saved),
                "adapter_nonzero_B": sum(int(v.abs().sum() > 0) for k, v in now.items() if "lora_B" in k),
            }
        # --- the step gate's count ($CPU_WORKER_GATE): EasyR1 loads global_step_N/actor
        step = os.path.basename(os.path.dirname(os.path.normpath(path))).removeprefix("global_step_")
        self._resumed_step = int(step) if step.isdigit() else 0
        _log("load_checkpoint", path=path, **check)

    # ------------------------------------------------------------------------------------------------ rollout
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def prepare_rollout_engine(self):
        pass  # no vLLM engine to wake and sync: generate() runs on the training weights

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def release_rollout_engine(self):
        pass

    def _candidates(self) -> list[dict]:
        path = os.getenv(CANDIDATES_ENV)
        if not path:
            return []
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def _wait_at_gate(self) -> None:
        """$CPU_WORKER_GATE (module docstring): wait until the gate file allows the step this generation is for."""
        gate = os.getenv(GATE_ENV)
        if not gate:
            return
        step, announced = self._resumed_step + self._updates + 1, False
        while True:
            try:
                with open(gate, encoding="utf-8") as f:
                    allowed = int(f.read().strip() or "0")
            except (OSError, ValueError):  # missing, or caught half-written
                allowed = 0
            if allowed >= step:
                return
            if not announced:
                _log("gate_wait", step=step, allowed=allowed)
                announced = True
            time.sleep(0.1)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto):
        from verl.utils.dataset import process_image

        self._wait_at_gate()
        eos = self.generation_config.eos_token_id if self.generation_config is not None else None
        pad = self.generation_config.pad_token_id if self.generation_config is not None else None
        prompts.meta_info.update(eos_token_id=eos if eos is not None else self.tokenizer.eos_token_id,
                                 pad_token_id=pad if pad is not None else self.tokenizer.pad_token_id)  # fmt: skip
        eos, pad = prompts.meta_info["eos_token_id"], prompts.meta_info["pad_token_id"]
        eos_first = eos[0] if isinstance(eos, list) else eos
        rollout = self.config.rollout
        n = prompts.meta_info.get("n", rollout.n)
        temperature = prompts.meta_info.get("temperature", rollout.temperature)
        top_p = prompts.meta_info.get("top_p", rollout.top_p)
        script = self._candidates()
        self._gen_calls += 1
        started = time.perf_counter()
        ids_all, mask_all = prompts.batch["input_ids"], prompts.batch["attention_mask"]
        mm = prompts.non_tensor_batch.get("multi_modal_data")
        raw = prompts.non_tensor_batch["raw_prompt_ids"]
        response_ids: list[list[int]] = []
        constrained = 0
        self.module.eval()
        for i in range(ids_all.size(0)):
            ids = ids_all[i][mask_all[i].bool()].unsqueeze(0)
            kwargs = {}
            if mm is not None and mm[i] and "images" in mm[i]:
                images = [process_image(im, prompts.meta_info.get("min_pixels"), prompts.meta_info.get("max_pixels"))
                          for im in mm[i]["images"]]  # fmt: skip
                kwargs.update(dict(self.processor.image_processor(images=images, return_tensors="pt")))
            text = self.tokenizer.decode(list(raw[i]))
            entry = next((e for e in script if e["question"] in text), None)
            if entry is not None:
                constrained += 1
                seqs = [self.tokenizer.encode(r, add_special_tokens=False) + [eos_first] for r in entry["responses"]]
                trie, start = _Trie(seqs, eos_first), ids.size(1)
                kwargs["prefix_allowed_tokens_fn"] = lambda _b, sent, t=trie, k=start: t.next_tokens(sent[k:].tolist())
            torch.manual_seed(GEN_SEED + 1000 * self._gen_calls + i)
            sample = temperature > 0
            with torch.no_grad():
                out = self.module.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=rollout.response_length,
                    do_sample=sample,
                    temperature=temperature if sample else None,
                    top_p=top_p if sample else None,
                    top_k=None,
                    num_return_sequences=n,
                    eos_token_id=eos,
                    pad_token_id=pad,
                    use_cache=True,
                    **kwargs,
                )
            for row in out[:, ids.size(1) :].tolist():
                if eos_first in row:
                    row = row[: row.index(eos_first) + 1]
                response_ids.append(row)
        _log("generate", prompts=int(ids_all.size(0)), n=n, constrained=constrained,
             seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        return rollout_output(prompts, response_ids, n, pad, eos_first, rollout.response_length)

    # ------------------------------------------------------------------------------------- log-probs, update
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_probs(self, data: DataProto):
        self._process_multi_modal_inputs(data)
        data.meta_info["temperature"] = self.config.rollout.temperature
        output = self.actor.compute_log_prob(data=data)
        return DataProto.from_dict(tensors={"old_log_probs": output},
                                   meta_info={"temperature": self.config.rollout.temperature})  # fmt: skip

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_probs(self, data: DataProto):
        adapter_ctx = self.module.disable_adapter() if self._is_lora else nullcontext()
        self._process_multi_modal_inputs(data)
        data.meta_info["temperature"] = self.config.rollout.temperature
        with adapter_ctx:
            output = self.ref_policy.compute_log_prob(data=data)
        return DataProto.from_dict(tensors={"ref_log_probs": output})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto):
        import psutil

        self._process_multi_modal_inputs(data)
        started = time.perf_counter()
        metrics = self.actor.update_policy(data=data)
        self._updates += 1
        metrics["perf/cpu_memory_used_gb"] = psutil.virtual_memory().used / (1024**3)
        metrics["actor/lr"] = self.lr_scheduler.get_last_lr()[0]
        self.lr_scheduler.step()
        _log("update_actor", seconds=round(time.perf_counter() - started, 3), responses=len(data),
             grad_norm=metrics.get("actor/grad_norm"), kl_loss=metrics.get("actor/kl_loss"))  # fmt: skip
        return DataProto(non_tensor_batch={k: np.array([v] if np.isscalar(v) else v) for k, v in metrics.items()})

    # ------------------------------------------------------------------------------------------------ critic
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto):
        raise NotImplementedError("the CPU worker has no critic (the recipe is GRPO)")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto):
        raise NotImplementedError("the CPU worker has no critic (the recipe is GRPO)")
