"""launch/budget_gpu.py (``python -m launch.budget gpu``): the GPU memory of the 8B recipe against the reference
figures of issue 31 (each within 15 %), the model's shapes against transformers' own count, the tiny random
Qwen3-VL's measured weights, adapter, gradients and AdamW state against the estimate, the refusal of a recipe that
cannot fit (the command and the job's dry run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launch import budget_gpu
from launch.budget_gpu import GIB, GPUS, QWEN3_VL_8B, ServerPlan, estimate, find_gpu, read_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"
TOL = 0.15
"""The stated tolerance against the reference figures (paper estimates, not measurements)."""


def near(got: float, ref: float, tol: float = TOL) -> bool:
    return abs(got - ref) <= tol * ref


@pytest.fixture(scope="module")
def h200():
    return budget_gpu.budget_from_recipe(RECIPE, [], find_gpu("h200"))


# --------------------------------------------------------------------------------------------- reference figures
def test_the_8b_recipe_on_two_h200_lands_within_15_percent_of_every_reference_figure(h200):
    roll, lp, up = (h200.phase("trainer", p) for p in ("rollout", "log-prob", "update"))
    assert h200.recipe.world == 2 and h200.recipe.n == 5
    assert near(roll.part("base weights (bf16 shard)"), 8.2)
    assert near(roll.part("trainable + grads + AdamW"), 1.3)
    assert not any("reference" in name for p in h200.phases for name, _, _ in p.parts)  # the adapter is disabled
    assert any("no separate reference model" in n for n in h200.notes)
    logits = up.part("logits + their gradient") / 2
    assert near(logits, 13.8)
    assert 50 * (1 - TOL) <= up.need_gib <= 55 * (1 + TOL)
    assert near(lp.need_gib, 50)
    vllm = sum(g for name, g, _ in roll.parts if name.startswith("vLLM"))
    assert near(vllm, 84) and near(h200.kv_gib, 60)
    assert near(h200.kv_tokens, 440_000)
    assert near(h200.groups(), 8.6) and near(h200.groups(30_000), 13)
    assert near(roll.need_gib, 96)
    server = h200.phase("server 1", "serving")
    assert server.fits and server.capacity_gib - server.need_gib > 20  # 0.55 + 0.25 of the GPU: ample room
    assert h200.fits and h200.refusal() is None


def test_the_kv_cache_is_the_share_less_weights_activations_and_graphs_at_144_kib_a_token(h200):
    roll = h200.phase("trainer", "rollout")
    share = sum(g for name, g, _ in roll.parts if name.startswith("vLLM"))
    assert share == pytest.approx(0.6 * 143_771 / 1024)  # gpu_memory_utilization x the whole GPU
    assert QWEN3_VL_8B.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2 == 147_456
    assert h200.kv_tokens == int(h200.kv_gib * GIB // 147_456)
    assert h200.group_tokens == 48_000 + 5 * 768  # the prompt once (prefix caching), five responses


# --------------------------------------------------------------------------------------------- shapes
def _tiny_config(text: dict | None = None, vision: dict | None = None):
    from tests.support.tiny_qwen3vl import WORDS, config

    vocab = {w: i for i, w in enumerate(["<|image_pad|>", "[UNK]", "<|vision_start|>", "<|vision_end|>", *WORDS])}
    return config(vocab, text, vision)


@pytest.mark.parametrize("size", ["tiny", "8b"])
def test_the_parameter_count_of_the_shapes_is_transformers_own(size):
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from tests.support.tiny_qwen3vl import QWEN3_VL_8B as DIMS

    cfg = _tiny_config() if size == "tiny" else _tiny_config(DIMS["text"], DIMS["vision"])
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(cfg)
    shape = budget_gpu.shape_from_config(cfg.to_dict())
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert shape.vision_params == sum(p.numel() for n, p in model.named_parameters() if ".visual." in n)
    if size == "8b":
        assert shape == QWEN3_VL_8B and shape.params == 8_767_123_696


def test_a_local_model_folder_is_read_from_its_config_json(tmp_path):
    cfg = _tiny_config()
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    r = read_recipe(RECIPE, [f"worker.actor.model.model_path={tmp_path}"])
    assert r.shape.hidden == 32 and r.shape.layers == 2 and r.shape.vocab == cfg.text_config.vocab_size
    with pytest.raises(budget_gpu.InputError, match="shapes are unknown"):
        read_recipe(RECIPE, ["worker.actor.model.model_path=org/unknown-model"])


# --------------------------------------------------------------------------------------------- measured on the CPU
def test_the_tiny_models_measured_weights_adapter_grads_and_adamw_match_the_estimate_within_2_percent():
    # The tiny random Qwen3-VL built as EasyR1 builds the actor (PEFT LoRA on the language model's linears, frozen
    # weights cast to bf16, the adapter fp32), one forward, backward and AdamW step on the CPU; then every byte the
    # parameters, their gradients and the optimizer's state hold, counted from the tensors themselves.
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    text = dict(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]})  # fmt: skip
    cfg = _tiny_config(text)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg)
    rank = 8
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=8, target_modules="all-linear",
                                             exclude_modules=".*visual.*"))  # fmt: skip
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16) if not p.requires_grad else p.data.float()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tokens = 40
    ids = torch.randint(10, 500, (1, tokens))
    out = model(input_ids=ids)
    logits = out.logits
    (logits.float().logsumexp(-1).mean()).backward()
    opt.step()

    def nbytes(t) -> int:
        return t.numel() * t.element_size()

    frozen = sum(nbytes(p) for p in model.parameters() if not p.requires_grad)
    trainable = [p for p in model.parameters() if p.requires_grad]
    state = sum(nbytes(p) + nbytes(p.grad) for p in trainable)
    state += sum(nbytes(v) for s in opt.state.values() for k, v in s.items() if k != "step")

    shape = budget_gpu.shape_from_config(cfg.to_dict())
    r = budget_gpu.GpuRecipe(
        model="tiny", shape=shape, world=1, prompt=tokens - 8, response=8, micro_update=1, micro_experience=1,
        lora_rank=rank, lora_targets="all-linear", gradient_checkpointing=True, freeze_vision=True,
        offload_params=False, offload_optimizer=False, use_kl_loss=True, n=5, gpu_util=0.6, tensor_parallel=1,
        max_batched_tokens=64, enforce_eager=False, limit_images=0, max_pixels=0,
    )  # fmt: skip
    b = estimate(r, find_gpu("h200"))
    up = b.phase("trainer", "update")
    assert r.lora_params == sum(p.numel() for p in trainable)  # PEFT's adapter, counted the same way
    assert up.part("base weights (bf16 shard)") * GIB == pytest.approx(frozen, rel=0.02)
    assert up.part("trainable + grads + AdamW") * GIB == pytest.approx(state, rel=0.02)
    # the logits over every token of a micro-batch of one sequence, bf16 as EasyR1's patched forward returns them
    assert logits.dtype == torch.bfloat16
    assert b.phase("trainer", "log-prob").part("logits (bf16)") * GIB == pytest.approx(nbytes(logits), rel=0.02)


def test_the_tiny_models_real_peak_memory_on_the_cpu_is_the_estimates_within_5_percent():
    # The log-prob phase of a tiny Qwen3-VL with a real vocabulary (32k: the logits dominate, as in the 8B recipe),
    # built as EasyR1 builds the actor, after one update (so its LoRA gradients and AdamW moments exist): torch's
    # memory profiler follows every tensor on the CPU through the optimizer step and a no-grad forward of 1,024
    # tokens; its peak against the estimate's parts that are not GPU constants (weights, adapter state, logits, the
    # last hidden states).
    import torch
    from peft import LoraConfig, get_peft_model
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline
    from transformers import Qwen3VLForConditionalGeneration

    text = dict(vocab_size=32768, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]})  # fmt: skip
    cfg = _tiny_config(text)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=8, target_modules="all-linear",
                                             exclude_modules=".*visual.*"))  # fmt: skip
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16) if not p.requires_grad else p.data.float()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, foreach=False)
    tokens = 1024
    ids = torch.randint(10, 30_000, (1, tokens))
    model(input_ids=ids[:, :64], use_cache=False).logits.float().logsumexp(-1).mean().backward()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        opt.step()
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline("cpu")
    peak = max(sum(s) for s in sizes)

    r = budget_gpu.GpuRecipe(
        model="tiny", shape=budget_gpu.shape_from_config(cfg.to_dict()), world=1, prompt=tokens - 64, response=64,
        micro_update=1, micro_experience=1, lora_rank=8, lora_targets="all-linear", gradient_checkpointing=True,
        freeze_vision=True, offload_params=False, offload_optimizer=False, use_kl_loss=True, n=5,
        gpu_util=0.6, tensor_parallel=1, max_batched_tokens=64, enforce_eager=False, limit_images=0, max_pixels=0,
    )  # fmt: skip
    lp = estimate(r, find_gpu("h200")).phase("trainer", "log-prob")
    parts = ("base weights (bf16 shard)", "trainable + grads + AdamW", "logits (bf16)", "last hidden states")
    estimated = sum(lp.part(p) for p in parts) * GIB
    assert logits.dtype == torch.bfloat16 and lp.part("logits (bf16)") * GIB / estimated > 0.8  # logits dominate
    assert peak == pytest.approx(estimated, rel=0.05), (peak, estimated)


# --------------------------------------------------------------------------------------------- GPUs
def test_gpu_names_slurm_types_and_nvidia_smi_are_read():
    assert find_gpu("A100-80GB") is GPUS["a100-80g"] and find_gpu("nvidia_h200") is GPUS["h200"]
    assert GPUS["h200"].gib == pytest.approx(140.4, abs=0.05) and GPUS["a100-40g"].gib == 40
    with pytest.raises(budget_gpu.InputError, match="known: h200, h100, a100-80g, a100-40g, l40s"):
        find_gpu("b200")
    assert budget_gpu.gpu_from_slurm({"SLURM_TRES_PER_NODE": "cpu:4,gres/gpu:l40s=2"})[0] is GPUS["l40s"]
    gpu, why = budget_gpu.gpu_from_slurm({"SLURM_GPUS_PER_NODE": "gpu:a100:3"})  # 40 or 80 GB: not guessed
    assert gpu is None and "no GPU type" in why
    # a GH200 (96 or 144 GB) is not the H200 (141 GB) its name contains: refused, not budgeted as 141 GB
    with pytest.raises(budget_gpu.InputError, match="'GH200': not a known GPU"):
        find_gpu("GH200")
    assert budget_gpu.gpu_from_slurm({"SLURM_GPUS_PER_NODE": "gpu:gh200:1"})[0] is None
    assert budget_gpu.gpu_from_model_name("NVIDIA H100 NVL") is None  # 94 GB: not the H100 80GB


def test_the_gpu_kind_is_read_from_the_drivers_model_names_the_smallest_first(tmp_path):
    def card(pci: str, model: str) -> None:
        (tmp_path / pci).mkdir()
        (tmp_path / pci / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 123\nBus Type: \t PCIe\n")

    assert budget_gpu.gpu_from_driver(tmp_path / "absent") == (None, f"no NVIDIA GPU listed in {tmp_path / 'absent'}")
    card("0000:17:00.0", "NVIDIA H100 80GB HBM3")
    assert budget_gpu.gpu_from_driver(tmp_path)[0] is GPUS["h100"]
    card("0000:65:00.0", "NVIDIA A100-SXM4-40GB")
    gpu, where = budget_gpu.gpu_from_driver(tmp_path)
    assert gpu is GPUS["a100-40g"] and str(tmp_path) in where
    card("0000:b3:00.0", "NVIDIA GB200")
    gpu, why = budget_gpu.gpu_from_driver(tmp_path)
    assert gpu is None and "NVIDIA GB200 is not a GPU kind the budget knows" in why
    (tmp_path / "0000:b3:00.0" / "information").write_text("Model: \t\t NVIDIA GH200 480GB\n")  # not an H200
    gpu, why = budget_gpu.gpu_from_driver(tmp_path)
    assert gpu is None and "NVIDIA GH200 480GB is not a GPU kind the budget knows" in why


def test_two_judges_on_two_serving_gpus_each_hold_one_share():
    plan = ServerPlan(serve_gpus=2, judge_replicas=2)
    assert [[name for name, _, _ in g] for g in plan.gpus()] == [["judge"], ["judge2", "embed"]]


# --------------------------------------------------------------------------------------------- the command
def budget_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.budget", "gpu", "--recipe", str(RECIPE), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip


def test_the_command_prints_the_table_for_h200_and_the_same_as_json():
    r = budget_cli("--gpu", "h200")
    assert r.returncode == 0, r.stderr
    for needle in ("rollout", "log-prob", "update", "server 1", "vLLM KV cache", "base weights (bf16 shard)"):
        assert needle in r.stdout
    r = budget_cli("--gpu", "h200", "--json")
    d = json.loads(r.stdout)
    assert d["fits"] and d["params"] == 8_767_123_696 and d["trainer_gpus"] == 2
    assert [(p["gpu"], p["phase"]) for p in d["phases"]] == [
        ("trainer", "rollout"), ("trainer", "log-prob"), ("trainer", "update"), ("server 1", "serving")]  # fmt: skip


@pytest.mark.parametrize(
    "args,phase,gpu",
    [
        (("--gpu", "a100-40g"), "log-prob", "A100 40GB: 40.0 GiB"),
        (("--gpu", "h200", "worker.actor.micro_batch_size_per_device_for_update=4"), "update", "H200: 140.4 GiB"),
        (("--gpu", "l40s"), "update", "L40S: 45.0 GiB"),
    ],
)
def test_a_recipe_that_cannot_fit_exits_3_with_one_line_naming_the_phase_the_gpu_and_the_numbers(args, phase, gpu):
    r = budget_cli(*args)
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: the {phase} phase needs ")
    assert gpu in lines[0] and " GiB on each trainer GPU" in lines[0]


def test_a_share_too_small_for_the_rollout_kv_cache_is_refused():
    r = budget_cli("--gpu", "h200", "worker.rollout.gpu_memory_utilization=0.15")
    assert r.returncode == 3 and "vLLM's KV cache" in r.stderr and "fewer than one prompt and response" in r.stderr


@pytest.mark.parametrize(
    "overrides,named",
    [
        (["worker.rollout.tensor_parallel_size=0"], "worker.rollout.tensor_parallel_size=0"),
        (["data.max_prompt_length=0", "data.max_response_length=0"], "data.max_prompt_length=0, data.max_response"),
        (["worker.actor.micro_batch_size_per_device_for_update=0"], "micro_batch_size_per_device_for_update=0"),
        (["trainer.n_gpus_per_node=0"], "trainer GPUs (n_gpus_per_node x nnodes)=0"),
        (["worker.rollout.gpu_memory_utilization=1.5"], "gpu_memory_utilization=1.5: expected more than 0"),
    ],
)
def test_a_recipe_number_the_estimate_divides_by_is_refused_naming_its_key(overrides, named):
    r = budget_cli("--gpu", "h200", *overrides)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: recipe {RECIPE}: ")
    assert named in r.stderr


# --------------------------------------------------------------------------------------------- the job
def _dry(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    from tests.launch.test_launch_dryrun import GRPO, base_env

    return subprocess.run(["bash", GRPO, "--dry-run"], env=base_env(tmp_path, **env), capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_job_refuses_a_recipe_its_gpus_cannot_hold_before_anything_starts(tmp_path):
    r = _dry(tmp_path, SLURM_GPUS_PER_NODE="gpu:a100-40g:3")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "error: the recipe cannot fit the GPUs (SLURM_GPUS_PER_NODE=gpu:a100-40g:3" in r.stderr
    assert "the log-prob phase needs" in r.stderr
    assert "[prepare]" not in r.stdout and "vllm serve" not in r.stdout  # nothing was planned to start
    ok = _dry(tmp_path, SLURM_GPUS_PER_NODE="gpu:h200:3")
    assert ok.returncode == 0, ok.stderr
    line = next(x for x in ok.stdout.splitlines() if "GPU memory budget" in x)
    assert "every phase fits a H200" in line and "update 56" in line


def test_without_a_gpu_type_from_slurm_the_job_reads_the_driver_and_adds_no_step(tmp_path):
    from tests.launch.test_launch_dryrun import steps

    r = _dry(tmp_path)
    assert r.returncode == 0, r.stderr
    note = next(x for x in r.stdout.splitlines() if x.startswith("# GPU memory budget"))
    if not budget_gpu.DRIVER_GPUS.is_dir():  # no NVIDIA driver here: the check says why it is skipped
        assert "skipped: no GPU type in SLURM_GPUS_PER_NODE" in note and "no NVIDIA GPU listed" in note
    names = [s["name"] for s in steps(tmp_path, SLURM_GPUS_PER_NODE="gpu:h200:3")]
    assert names[:2] == ["prepare", "disk"]  # a computation and a file read: nothing for the executor to run
