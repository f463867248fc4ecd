"""Shared code of the `easyr1` tier's drivers. Runs in .venv-easyr1 (EasyR1 b44b311 importable as `verl`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any


def load_config(argv: list[str]):
    """The config path of ``verl/trainer/main.py:main`` at b44b311, line for line, on ``argv`` instead of
    ``sys.argv`` (main() itself then starts Ray and the FSDP workers, which need GPUs): structured PPOConfig,
    merge the ``config=`` file, merge the command line, ``to_object``, ``deep_post_init``."""
    from omegaconf import OmegaConf
    from verl.trainer.config import PPOConfig

    cli_args = OmegaConf.from_cli(list(argv))
    default_config = OmegaConf.structured(PPOConfig())
    if hasattr(cli_args, "config"):
        config_path = cli_args.pop("config", None)
        file_config = OmegaConf.load(config_path)
        default_config = OmegaConf.merge(default_config, file_config)
    ppo_config = OmegaConf.merge(default_config, cli_args)
    ppo_config = OmegaConf.to_object(ppo_config)
    ppo_config.deep_post_init()
    return ppo_config


def schema_keys(obj: Any, prefix: str = "") -> dict[str, dict]:
    """Every dotted key of EasyR1's config dataclasses: {"init": False for post_init-owned fields, "mapping": True
    for dict-typed fields (open mappings)}."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value):
            out.update(schema_keys(value, key + "."))
        else:
            out[key] = {"init": f.init, "mapping": isinstance(value, dict)}
    return out


def report(data: dict) -> None:
    """The driver's result: one JSON line, last on stdout."""
    sys.stdout.flush()
    print(json.dumps(data, default=str), flush=True)


# ------------------------------------------------------------------------------------------- tiny Qwen3-VL
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]  # fmt: skip
# Qwen's chat layout (ours, written here): image slots become <|vision_start|><|image_pad|><|vision_end|>, which the
# processor expands to one <|image_pad|> per merged 32x32 cell.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'video' -%}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- else -%}{{ item['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def write_tiny_qwen3vl(path: str, with_weights: bool = False, servable: bool = False) -> None:
    """A Qwen3-VL-style checkpoint folder built offline: a byte-level BPE tokenizer without merges (every text
    round-trips exactly, as through Qwen's tokenizer) with Qwen's special tokens, Qwen3-VL-8B's image processor
    settings (data_prep.qwen_tokens.QWEN3_VL: patch 16, merge 2), its video processor, a chat template, and a tiny
    Qwen3VLConfig (random weights when ``with_weights``): text hidden 32 in 4 heads of 8, or, when ``servable``, the
    product's tiny policy dimensions (reward/tiny_policy.py: heads of 32, which vLLM's CPU attention serves), so the
    adapter EasyR1's fit trains on it loads into the vLLM tier."""
    from pathlib import Path

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import Qwen2TokenizerFast, Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from data_prep.qwen_tokens import QWEN3_VL
    from reward.tiny_policy import TEXT, VISION

    if (Path(path) / "config.json").exists():
        return
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=tok,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[t for t in SPECIAL if t not in ("<|im_end|>", "<|endoftext|>")],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    image_processor = Qwen2VLImageProcessor(
        patch_size=QWEN3_VL.patch_size,
        merge_size=QWEN3_VL.merge_size,
        temporal_patch_size=2,
        min_pixels=QWEN3_VL.min_pixels,
        max_pixels=QWEN3_VL.max_pixels,
        size={"shortest_edge": QWEN3_VL.min_pixels, "longest_edge": QWEN3_VL.max_pixels},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    video_processor = Qwen3VLVideoProcessor(patch_size=QWEN3_VL.patch_size, merge_size=QWEN3_VL.merge_size)
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )
    Path(path).mkdir(parents=True, exist_ok=True)
    processor.save_pretrained(path)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8,
                rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True})  # fmt: skip
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=32,
                  patch_size=QWEN3_VL.patch_size, spatial_merge_size=QWEN3_VL.merge_size, temporal_patch_size=2,
                  num_position_embeddings=64, deepstack_visual_indexes=[1])  # fmt: skip
    if servable:
        text, vision = dict(TEXT), dict(VISION)
    config = Qwen3VLConfig(
        text_config={**text, "vocab_size": len(tokenizer)},
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    config.save_pretrained(path)
    if with_weights:
        import torch
        from transformers import Qwen3VLForConditionalGeneration

        torch.manual_seed(0)
        Qwen3VLForConditionalGeneration(config).save_pretrained(path)


# ------------------------------------------------------------------------------------------- scripted rollout
class ScriptedRollout:
    """Stands where the actor/rollout worker group stands (``RayPPOTrainer.actor_rollout_ref_wg``) for the calls
    the batch-making and validation paths make: ``world_size``, ``prepare_rollout_engine``,
    ``release_rollout_engine`` and ``generate_sequences``. Generation is scripted: the responses of a prompt are
    the texts listed for the question it contains; the output DataProto is built the way
    ``vLLMRollout.generate_sequences`` (verl/workers/rollout/vllm_rollout_spmd.py) builds it from vLLM's token ids,
    with EasyR1's own helpers, after the meta_info ``FSDPWorker.generate_sequences`` adds."""

    def __init__(self, tokenizer, script: list[dict], n: int, response_length: int, world_size: int):
        self.tokenizer = tokenizer
        self.script = script
        self.n = n
        self.response_length = response_length
        self.world_size = world_size
        self.calls: list[int] = []

    def prepare_rollout_engine(self) -> None:
        pass

    def release_rollout_engine(self) -> None:
        pass

    def _responses(self, prompt_text: str, n: int) -> list[str]:
        for entry in self.script:
            if entry["question"] in prompt_text:
                return list(entry["responses"][:n])
        raise AssertionError(f"no scripted responses for the prompt {prompt_text[-300:]!r}")

    def generate_sequences(self, prompts):
        import torch
        from tensordict import TensorDict
        from verl.protocol import DataProto
        from verl.utils import torch_functional as VF
        from verl.workers.rollout.vllm_rollout_spmd import _repeat_interleave

        prompts.meta_info.update(eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id)
        n = prompts.meta_info.get("n", self.n)  # validation passes val_override_config (n=1) as meta_info
        input_ids = prompts.batch["input_ids"]
        attention_mask = prompts.batch["attention_mask"]
        position_ids = prompts.batch["position_ids"]
        eos_token_id = prompts.meta_info["eos_token_id"]
        batch_size = input_ids.size(0)
        non_tensor_batch = prompts.non_tensor_batch
        batch_raw_prompt_ids = non_tensor_batch.pop("raw_prompt_ids")
        batch_multi_modal_data = non_tensor_batch.pop("multi_modal_data", None)
        self.calls.append(batch_size)
        # vLLM's RequestOutput.outputs[i].token_ids: the sampled ids, ending with EOS when the text finished
        response_ids = []
        for raw in batch_raw_prompt_ids:
            text = self.tokenizer.decode(list(raw))
            for r in self._responses(text, n):
                response_ids.append(self.tokenizer.encode(r, add_special_tokens=False) + [eos_token_id])
        response_ids = VF.pad_2d_list_to_length(
            response_ids, self.tokenizer.pad_token_id, max_length=self.response_length
        ).to(input_ids.device)
        if n > 1:
            batch_size = batch_size * n
            input_ids = _repeat_interleave(input_ids, n)
            attention_mask = _repeat_interleave(attention_mask, n)
            position_ids = _repeat_interleave(position_ids, n)
            if batch_multi_modal_data is not None:
                batch_multi_modal_data = _repeat_interleave(batch_multi_modal_data, n)
        sequence_ids = torch.cat([input_ids, response_ids], dim=-1)
        response_length = response_ids.size(1)
        delta_position_id = torch.arange(1, response_length + 1, device=position_ids.device)
        delta_position_id = delta_position_id.view(1, -1).expand(batch_size, -1)
        if position_ids.ndim == 3:  # qwen2vl mrope: (batch_size, 4, seq_length)
            delta_position_id = delta_position_id.view(batch_size, 1, -1).expand(batch_size, position_ids.size(1), -1)
        response_position_ids = position_ids[..., -1:] + delta_position_id
        position_ids = torch.cat([position_ids, response_position_ids], dim=-1)
        response_mask = VF.get_response_mask(
            response_ids=response_ids, eos_token_id=eos_token_id, dtype=attention_mask.dtype
        )
        attention_mask = torch.cat((attention_mask, response_mask), dim=-1)
        batch = TensorDict(
            {
                "prompts": input_ids,
                "responses": response_ids,
                "input_ids": sequence_ids,
                "attention_mask": attention_mask,
                "response_mask": response_mask,
                "position_ids": position_ids,
            },
            batch_size=batch_size,
        )
        non_tensor = {"multi_modal_data": batch_multi_modal_data} if batch_multi_modal_data is not None else {}
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=prompts.meta_info)


def start_local_ray(num_cpus: int = 3) -> None:
    """Ray on this machine only: no dashboard, bound to 127.0.0.1, with main.py's runtime environment."""
    import ray

    ray.init(
        address="local",  # a new cluster, never the one a stale /tmp/ray/ray_current_cluster names
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=True,
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}},
    )


def wandb_offline_history(run_file: str) -> list[dict]:
    """The history rows (``wandb.log`` calls) of an offline run, read back from its ``run-*.wandb`` file: a
    LevelDB-style log (7-byte file header, 32 KiB blocks of chunks with a 7-byte header: crc32, length, type) of
    ``wandb_internal_pb2.Record`` messages. Verification only: it reads what the wandb logger wrote."""
    import json
    from pathlib import Path

    from wandb.proto import wandb_internal_pb2

    data = Path(run_file).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{run_file}: not a wandb run file")
    block, pos, buf, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            records.append(buf + chunk)
            buf = b""
    rows = []
    for raw in records:
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(raw)
        if rec.WhichOneof("record_type") == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            rows.append(row)
    return rows


if __name__ == "__main__":  # harness.py wandb-history RUN_FILE: read an offline run after its process has ended
    if sys.argv[1:2] != ["wandb-history"] or len(sys.argv) != 3:
        sys.exit("usage: harness.py wandb-history RUN_FILE")
    report({"history": wandb_offline_history(sys.argv[2])})
