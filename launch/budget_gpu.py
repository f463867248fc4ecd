"""GPU memory of a training run, per phase and per GPU: what the recipe needs and whether it fits.

``python -m launch.budget gpu --recipe recipes/qwen3vl_8b_grpo.yaml --gpu h200`` prints, for a trainer GPU, the
three phases of a GRPO step (``rollout``: vLLM generates while the trainer's shards stay; ``log-prob``: the old and
reference log-probs; ``update``: forward and backward of one micro-batch) and, for each serving GPU, the judge and
embedder servers; each part in GiB (2**30 bytes), the total against the GPU, and vLLM's KV cache in tokens and in
groups of ``rollout.n``. ``--json`` prints the same as one JSON object. A phase that cannot fit makes it exit 3 with
one ``error:`` line naming the phase, the GPU and the numbers; the training job (``launch/job.py``) runs the same
check before any server starts (the GPU kind from Slurm's ``gpu:h200:3``, else from the NVIDIA driver's model
name) and refuses such a recipe.

Every number comes from the model's shapes (:class:`ModelShape`: :data:`KNOWN_SHAPES` by model name, or a local
folder's ``config.json``), the recipe, EasyR1 at b44b311 (read in ``verl/``) and the assumptions named by the
constants below. Per trainer GPU (FSDP ``FULL_SHARD`` over the ``W`` trainer GPUs):

- *base weights*: with LoRA, EasyR1 casts every frozen parameter to bf16 (``fsdp_workers._build_model_optimizer``):
  params x 2 / W; without LoRA the actor is fp32 (``fsdp.torch_dtype`` defaults to fp32): params x 4 / W;
  ``offload.offload_params`` keeps them on the CPU (0 here).
- *trainable state*: the trainable parameters in fp32 with their fp32 gradients and AdamW's two fp32 moments:
  16 bytes each / W (the gradients are freed by ``zero_grad`` between steps; counted as an upper bound);
  ``offload.offload_optimizer`` moves the moments to the CPU (8 bytes). With LoRA the trainable parameters are the
  adapter's (:meth:`ModelShape.lora_params`); without, every parameter but a frozen vision tower's.
- *reference model*: none with LoRA (EasyR1 computes the reference log-probs with the adapter disabled); without
  LoRA and with ``use_kl_loss`` a bf16 copy of the policy, params x 2 / W.
- *trainer context* (:data:`TRAINER_CONTEXT_GIB`), *FSDP gather* (the FSDP root unit, embeddings and LM head,
  unsharded for the whole forward and backward, plus two decoder layers: the one computing and the one prefetched)
  and, outside the rollout, what a sleeping vLLM keeps (:data:`VLLM_ASLEEP_GIB`).
- *rollout*: vLLM's share is ``rollout.gpu_memory_utilization`` x the GPU's memory (vLLM sizes it from the total,
  not from what is free): its weights (params x 2 / TP), the LoRA slot (adapter x 2), the profile run's activations
  (:func:`vllm_act_bytes_per_token` x ``max_num_batched_tokens``), CUDA graphs and non-torch memory
  (:data:`VLLM_GRAPHS_GIB`, :data:`VLLM_NON_TORCH_GIB`) and the KV cache, the rest: ``2 x layers x kv_heads x
  head_dim x 2`` bytes a token. A group of ``n`` responses to one prompt of P tokens holds ``P + n x
  max_response_length`` tokens (vLLM's prefix caching keeps the shared prompt once).
- *log-prob*: EasyR1's dynamic batching packs up to ``micro_batch_size_per_device_for_experience x
  (max_prompt_length + max_response_length)`` tokens into one forward (``dp_actor.compute_log_prob``), without
  gradients: the bf16 logits over every token (``vocab x tokens x 2``; the patched Qwen3-VL forward returns them
  all, ``log_probs_from_logits`` then uses flash-attn's cross-entropy in place), the last hidden states and the
  micro-batch's ``pixel_values`` (fp32 and their bf16 copy: :data:`PIXEL_GPU_BYTES` a pixel).
- *update*: ``micro_batch_size_per_device_for_update x (prompt + response)`` tokens a micro-batch. With gradient
  checkpointing every decoder layer keeps its input (``tokens x hidden x 2`` a layer); then the larger of the
  logits with their gradient (the bf16 logits, whose storage flash-attn's cross-entropy backward overwrites with the
  gradient, and the gradient through the in-place ``div_(temperature)``: 2 x the logits) and one layer recomputed
  in the backward (:func:`train_layer_bytes_per_token`). Without checkpointing every layer keeps its activations.
- *servers*: each ``vllm serve`` takes its ``--gpu-memory-utilization`` x the GPU (the launch's
  ``QUOTECITE_JUDGE_GPU_UTIL`` and ``QUOTECITE_EMBED_GPU_UTIL``); the servers of one GPU fit when their shares add up
  to at most the GPU and each share holds its model's bf16 weights plus :data:`SERVER_MIN_GIB`.

Reference figures (the 8B recipe on 2 H200 trainer GPUs, paper estimates; ``tests/launch/test_budget_gpu.py``
checks each within 15 %): base shard 8.2 GiB, LoRA state 1.3 GiB, update micro-batch of 48.8k tokens 50-55 GiB
(13.8 GiB of it logits), log-prob micro-batch about 50 GiB, vLLM at 0.6 about 84 GiB with about 60 GiB of KV
(440k tokens: 8.6 groups of 5 at 48k-token prompts, 13 at 30k), rollout about 96 GiB. This model gives 56 GiB for
the update (above the reference's 55: it counts the logits' gradient next to the logits, and the trainer's
context, the FSDP gather and the sleeping vLLM, which the reference leaves out) and 45 GiB for the log-prob
micro-batch (below the reference's 50: without gradients it counts no second logits-sized tensor). Autograd's
``CopySlices`` for the in-place division of a view may briefly hold one or two more logits-sized gradients, which no
figure counts: the update's margin on an 80 GB GPU is the first to check on a real run. Not counted either: the
vision tower's activations (frozen, run without a graph in the trainer; smaller than the language model's in vLLM's
profile run). On the CPU the same test file builds the tiny random Qwen3-VL (32k vocabulary) as EasyR1 builds the
actor and finds its weights, adapter, gradients and AdamW state byte for byte, and the peak torch's memory profiler
reports for an optimizer step and a no-grad forward of 1,024 tokens within 5 % of these parts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import read_json
from data_prep.validate import bounded_float, positive_int
from launch import settings
from recipes.reader import RecipeError, dig, load_recipe

GIB = 2**30
MIB = 2**20

# ----------------------------------------------------------------------------- assumptions (see the docstring)
TRAINER_CONTEXT_GIB = 2.0
"""One trainer process on its GPU outside its tensors: the CUDA context (about 0.5 GiB on Hopper), NCCL's buffers
for FSDP's collectives and the caching allocator's slack."""
VLLM_ASLEEP_GIB = 1.0
"""What a vLLM engine put to ``sleep(level=1)`` still holds on the GPU (its CUDA graphs' pools, sampler buffers)."""
VLLM_NON_TORCH_GIB = 1.0
"""vLLM's memory outside torch's allocator inside its share (its CUDA context, NCCL, cuBLAS workspaces)."""
VLLM_GRAPHS_GIB = 1.0
"""vLLM's CUDA graphs (0 with ``enforce_eager``)."""
PIXEL_GPU_BYTES = 36
"""``pixel_values`` on the GPU per image pixel: float32 x 3 channels x ``temporal_patch_size`` 2 (24 bytes, as on
the host: ``launch.budget.PIXEL_VALUE_BYTES``) plus the bf16 copy the vision tower is fed (12)."""
SERVER_MIN_GIB = 4.0
"""A server's share beyond its weights for the least KV cache, activations and CUDA graphs it starts with."""


def vllm_act_bytes_per_token(s: ModelShape) -> int:
    """Bytes a token of vLLM's profile run (one forward of ``max_num_batched_tokens``): the fused gate/up output
    (2 x intermediate), the activation (intermediate), the q/k/v output and four hidden-size buffers (residual,
    normed input, attention output, MLP output), bf16."""
    return 2 * (3 * s.intermediate + s.q + 2 * s.kv + 4 * s.hidden)


def train_layer_bytes_per_token(s: ModelShape) -> int:
    """Bytes a token of one decoder layer's forward kept for its backward, and the gradient buffers of that
    backward (recomputed under gradient checkpointing): q/k/v/attention output and flash-attention's log-sum-exp,
    six hidden-size tensors (norms, residuals, projections), gate, up, activation and their product, and the
    gradient of the largest (the intermediate-size ones), bf16."""
    return 2 * (s.q + 2 * s.kv + s.q + 6 * s.hidden + 5 * s.intermediate)


# --------------------------------------------------------------------------------------------- GPUs
@dataclass(frozen=True)
class Gpu:
    """A GPU kind: its memory as ``nvidia-smi --query-gpu=memory.total`` reports it (MiB), and the nominal size."""

    name: str
    mib: int
    nominal: str

    @property
    def gib(self) -> float:
        return self.mib * MIB / GIB


GPUS: dict[str, Gpu] = {
    "h200": Gpu("H200", 143_771, "141 GB"),
    "h100": Gpu("H100 80GB", 81_559, "80 GB"),
    "a100-80g": Gpu("A100 80GB", 81_920, "80 GB"),
    "a100-40g": Gpu("A100 40GB", 40_960, "40 GB"),
    "l40s": Gpu("L40S", 46_068, "48 GB"),
}
"""The GPUs ``--gpu`` knows, by name; memory as the driver reports it (what vLLM's utilisation multiplies)."""


def _gpu_key(name: str) -> str:
    """``A100-80GB``, ``a100_80g``, ``nvidia_h200`` -> the :data:`GPUS` spelling compared without separators."""
    k = re.sub(r"[^a-z0-9]", "", name.lower()).removeprefix("nvidia")
    return re.sub(r"(\d+)gb$", r"\1g", k)


def find_gpu(name: str) -> Gpu:
    """The GPU named ``name`` (separators and a trailing ``GB`` do not matter); :class:`InputError` listing the
    known ones."""
    for key, gpu in GPUS.items():
        if _gpu_key(name) == _gpu_key(key):
            return gpu
    raise InputError(f"--gpu {name!r}: not a known GPU (known: {', '.join(GPUS)})")


SLURM_GPU_VARIABLES = ("SLURM_GPUS_PER_NODE", "SLURM_TRES_PER_NODE", "SLURM_GPUS")
"""Where a Slurm job's GPU type may appear (``gpu:h200:3``, ``gres/gpu:h200=3``, ``h200:3``)."""


def gpu_from_slurm(environ) -> tuple[Gpu | None, str]:
    """(the GPU kind the job's Slurm variables name, where it was read), or (None, why not).

    >>> gpu_from_slurm({"SLURM_GPUS_PER_NODE": "gpu:h200:3"})[0].name
    'H200'
    >>> gpu_from_slurm({"SLURM_GPUS_PER_NODE": "3"})
    (None, 'no GPU type in SLURM_GPUS_PER_NODE, SLURM_TRES_PER_NODE, SLURM_GPUS')
    """
    for var in SLURM_GPU_VARIABLES:
        for item in (environ.get(var) or "").split(","):
            parts = [p for p in re.split(r"[:=/]", item.strip()) if p and p not in ("gpu", "gres")]
            for p in parts:
                if not p.isdigit():
                    try:
                        return find_gpu(p), f"{var}={environ[var]}"
                    except InputError:
                        continue
    return None, f"no GPU type in {', '.join(SLURM_GPU_VARIABLES)}"


DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
"""The NVIDIA driver's folder of this node's GPUs: ``<pci id>/information`` holds ``Model: NVIDIA H200``."""


def gpu_from_model_name(model: str) -> Gpu | None:
    """The :data:`GPUS` kind a driver's model name stands for (``NVIDIA A100-SXM4-40GB`` -> A100 40GB), None when
    none (or when it is ambiguous, as an H100 NVL's 94 GB).

    >>> gpu_from_model_name("NVIDIA H100 80GB HBM3").name, gpu_from_model_name("NVIDIA H100 NVL")
    ('H100 80GB', None)
    """
    k = re.sub(r"[^a-z0-9]", "", model.lower())
    if "a100" in k:
        return GPUS["a100-80g"] if "80g" in k else GPUS["a100-40g"] if "40g" in k else None
    for key in ("h200", "l40s"):
        if key in k:
            return GPUS[key]
    return GPUS["h100"] if "h100" in k and "nvl" not in k else None


def gpu_from_driver(root: Path = DRIVER_GPUS) -> tuple[Gpu | None, str]:
    """(the smallest GPU kind the driver lists on this node, where it was read), or (None, why not): a file read,
    no process, so the dry run on the same node decides the same."""
    found, unknown = [], []
    for info in sorted(root.glob("*/information")) if root.is_dir() else []:
        try:
            text = info.read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"^Model:\s*(.+)$", text, re.M)
        if m:
            gpu = gpu_from_model_name(m.group(1).strip())
            (found if gpu else unknown).append(gpu or m.group(1).strip())
    if found and not unknown:
        return min(found, key=lambda g: g.mib), f"{root}: {found[0].name}"
    if unknown:
        return None, f"{root}: {unknown[0]} is not a GPU kind the budget knows"
    return None, f"no NVIDIA GPU listed in {root}"


# --------------------------------------------------------------------------------------------- model shapes
@dataclass(frozen=True)
class ModelShape:
    """What the GPU estimates need of a (vision-)language model: its language model's shapes and its vision tower's
    (``vision_depth`` 0: none). :attr:`params` counts them as transformers' ``Qwen3VLForConditionalGeneration``
    does (``tests/launch/test_budget_gpu.py`` checks the count against transformers)."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tie_embeddings: bool = False
    vision_depth: int = 0
    vision_hidden: int = 0
    vision_intermediate: int = 0
    vision_out: int = 0
    patch_size: int = 16
    temporal_patch_size: int = 2
    in_channels: int = 3
    spatial_merge: int = 2
    vision_positions: int = 0
    deepstack: int = 0

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """One decoder layer: q/k/v/o, q/k norms, the gated MLP, two RMS norms."""
        h = self.hidden
        return h * self.q + 2 * h * self.kv + self.q * h + 2 * self.head_dim + 3 * h * self.intermediate + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def text_params(self) -> int:
        head = 0 if self.tie_embeddings else self.embedding_params
        return self.embedding_params + self.layers * self.layer_params + self.hidden + head

    @property
    def vision_params(self) -> int:
        """Patch embedding, position embedding, the blocks (LayerNorms with biases, qkv, proj, MLP) and the patch
        mergers (the main one and one per deepstack layer)."""
        if not self.vision_depth:
            return 0
        vh, vi = self.vision_hidden, self.vision_intermediate
        patch = vh * self.in_channels * self.temporal_patch_size * self.patch_size**2 + vh
        block = 4 * vh * vh + 2 * vh * vi + 9 * vh + vi
        mh = vh * self.spatial_merge**2
        linears = mh * mh + mh + self.vision_out * mh + self.vision_out
        merger = 2 * vh + linears
        deep = 2 * mh + linears
        return patch + self.vision_positions * vh + self.vision_depth * block + merger + self.deepstack * deep

    @property
    def params(self) -> int:
        return self.text_params + self.vision_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token."""
        return 2 * self.layers * self.kv * dtype_bytes

    def lora_params(self, rank: int, targets: str = "all-linear") -> int:
        """Parameters of a LoRA adapter of ``rank`` on the language model's linear layers, ``rank x (in + out)``
        each (PEFT's ``all-linear`` takes every linear but the LM head; the recipe keeps the vision tower out)."""
        h, i = self.hidden, self.intermediate
        shapes = {"q_proj": (h, self.q), "k_proj": (h, self.kv), "v_proj": (h, self.kv), "o_proj": (self.q, h),
                  "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip
        names = list(shapes) if targets.strip() == "all-linear" else [t.strip() for t in targets.split(",") if t]
        unknown = [n for n in names if n not in shapes]
        if unknown:
            raise InputError(f"lora.target_modules: {', '.join(unknown)} not among {', '.join(shapes)}")
        return self.layers * sum(rank * sum(shapes[n]) for n in names)


QWEN3_VL_8B = ModelShape(
    vocab=151_936, hidden=4096, intermediate=12_288, layers=36, heads=32, kv_heads=8, head_dim=128,
    vision_depth=27, vision_hidden=1152, vision_intermediate=4304, vision_out=4096, vision_positions=2304,
    deepstack=3,
)  # fmt: skip
"""Qwen3-VL-8B-Instruct's ``config.json``: 8,767,123,696 parameters (the published 8.77B), 576,388,336 of them in
the vision tower."""

KNOWN_SHAPES: dict[str, ModelShape] = {
    "qwen3-vl-8b-instruct": QWEN3_VL_8B,
    "qwen3-vl-8b-thinking": QWEN3_VL_8B,
}
"""By the model id's last component, lower case; any other model is read from its local folder's ``config.json``."""


def shape_from_config(cfg: dict, where: str = "config.json") -> ModelShape:
    """The shapes in a Hugging Face ``config.json`` (``text_config``/``vision_config`` for a vision-language model,
    the top level for a language model)."""
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: not a JSON object")
    text = cfg.get("text_config") or cfg
    vision = cfg.get("vision_config") or {}
    try:
        heads, hidden = int(text["num_attention_heads"]), int(text["hidden_size"])
        tie = text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
        return ModelShape(
            vocab=int(text["vocab_size"]), hidden=hidden, intermediate=int(text["intermediate_size"]),
            layers=int(text["num_hidden_layers"]), heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads), tie_embeddings=bool(tie),
            vision_depth=int(vision.get("depth", 0)), vision_hidden=int(vision.get("hidden_size", 0)),
            vision_intermediate=int(vision.get("intermediate_size", 0)),
            vision_out=int(vision.get("out_hidden_size", hidden) if vision else 0),
            patch_size=int(vision.get("patch_size", 16)), temporal_patch_size=int(vision.get("temporal_patch_size", 2)),
            in_channels=int(vision.get("in_channels", 3)), spatial_merge=int(vision.get("spatial_merge_size", 2)),
            vision_positions=int(vision.get("num_position_embeddings", 0)),
            deepstack=len(vision.get("deepstack_visual_indexes") or []),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{where}: not a transformer config with layer shapes ({type(e).__name__}: {e})") from None


def model_shape(model: str) -> ModelShape | None:
    """The shapes of ``model``: a local folder's ``config.json``, else :data:`KNOWN_SHAPES`; None when neither."""
    cfg = Path(model) / "config.json"
    if cfg.is_file():
        return shape_from_config(read_json(cfg, "model config"), str(cfg))
    return KNOWN_SHAPES.get(model.rstrip("/").rsplit("/", 1)[-1].lower())


def _billions(model: str) -> float | None:
    """The parameter count (billions) a server model's id carries (``Qwen/Qwen3.5-9B`` -> 9)."""
    found = re.findall(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", model.rstrip("/").rsplit("/", 1)[-1])
    return max(map(float, found)) if found else None


# --------------------------------------------------------------------------------------------- the recipe
@dataclass(frozen=True)
class GpuRecipe:
    """What the GPU estimates read from a recipe (EasyR1's defaults where it says nothing)."""

    model: str
    shape: ModelShape
    world: int
    prompt: int
    response: int
    micro_update: int
    micro_experience: int
    lora_rank: int
    lora_targets: str
    gradient_checkpointing: bool
    freeze_vision: bool
    full_shard: bool
    offload_params: bool
    offload_optimizer: bool
    use_kl_loss: bool
    n: int
    gpu_util: float
    tensor_parallel: int
    max_batched_tokens: int
    enforce_eager: bool
    limit_images: int
    max_pixels: int

    @property
    def lora_params(self) -> int:
        return self.shape.lora_params(self.lora_rank, self.lora_targets) if self.lora_rank > 0 else 0


def _get(recipe: dict, key: str, default: Any, kind=int) -> Any:
    v = dig(recipe, key, default)
    if v is None:
        v = default
    try:
        if isinstance(v, bool) and kind is not bool:
            raise ValueError
        return kind(v)
    except (TypeError, ValueError):
        raise InputError(f"recipe {key}={v!r}: expected {kind.__name__}") from None


def load_policy_recipe(path: str | Path, overrides: list[str] | None = None) -> tuple[dict, str]:
    """The recipe with EasyR1 ``key=value`` overrides applied, and its policy model
    (``worker.actor.model.model_path``); :class:`InputError` naming the recipe otherwise."""
    try:
        r = load_recipe(path, overrides or [])
    except RecipeError as e:
        raise InputError(str(e)) from None
    model = dig(r, "worker.actor.model.model_path")
    if not isinstance(model, str) or not model:
        raise InputError(f"recipe {path}: no worker.actor.model.model_path")
    return r, model


def read_recipe(path: str | Path, overrides: list[str] | None = None, world: int | None = None) -> GpuRecipe:
    """The recipe's lengths, batch sizes and switches (with EasyR1 ``key=value`` overrides); ``world`` replaces
    ``trainer.n_gpus_per_node x trainer.nnodes``. :class:`InputError` when the policy's shapes are unknown."""
    r, model = load_policy_recipe(path, overrides)
    shape = model_shape(model)
    if shape is None:
        raise InputError(f"model {model!r}: its shapes are unknown (known: {', '.join(KNOWN_SHAPES)}); point "
                         "worker.actor.model.model_path at a local folder with its config.json")  # fmt: skip
    g = lambda key, default, kind=int: _get(r, key, default, kind)  # noqa: E731
    a, ro = "worker.actor.", "worker.rollout."
    prompt, response = g("data.max_prompt_length", 512), g("data.max_response_length", 512)
    return GpuRecipe(
        model=model, shape=shape,
        world=world or g("trainer.n_gpus_per_node", 8) * g("trainer.nnodes", 1),
        prompt=prompt, response=response,
        micro_update=g(a + "micro_batch_size_per_device_for_update", 4),
        micro_experience=g(a + "micro_batch_size_per_device_for_experience", 16),
        lora_rank=g(a + "model.lora.rank", 0), lora_targets=str(dig(r, a + "model.lora.target_modules", "all-linear")),
        gradient_checkpointing=g(a + "model.enable_gradient_checkpointing", True, bool),
        freeze_vision=g(a + "model.freeze_vision_tower", False, bool),
        full_shard=g(a + "fsdp.enable_full_shard", True, bool),
        offload_params=g(a + "offload.offload_params", False, bool) or g(a + "fsdp.enable_cpu_offload", False, bool),
        offload_optimizer=g(a + "offload.offload_optimizer", False, bool),
        use_kl_loss=g("algorithm.use_kl_loss", False, bool) and not g("algorithm.disable_kl", False, bool),
        n=g(ro + "n", 1), gpu_util=g(ro + "gpu_memory_utilization", 0.6, float),
        tensor_parallel=g(ro + "tensor_parallel_size", 2),
        max_batched_tokens=g(ro + "max_num_batched_tokens", 8192), enforce_eager=g(ro + "enforce_eager", False, bool),
        limit_images=g(ro + "limit_images", 0), max_pixels=g("data.max_pixels", 4_194_304),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------- the estimate
@dataclass
class Phase:
    """One phase on one GPU: its parts as (part, GiB, why) and whether their sum fits the GPU."""

    gpu: str
    """Which GPU: ``trainer`` (each of them) or ``server N``."""
    phase: str
    parts: list[tuple[str, float, str]]
    capacity_gib: float

    @property
    def need_gib(self) -> float:
        return sum(g for _, g, _ in self.parts)

    @property
    def fits(self) -> bool:
        return self.need_gib <= self.capacity_gib

    def part(self, name: str) -> float:
        return next(g for p, g, _ in self.parts if p == name)


@dataclass
class GpuBudget:
    """The phases of a recipe on a GPU kind, vLLM's KV cache and the groups of ``n`` it holds."""

    gpu: Gpu
    recipe: GpuRecipe
    phases: list[Phase]
    kv_gib: float
    kv_tokens: int
    group_tokens: int
    notes: list[str] = field(default_factory=list)

    def groups(self, prompt_tokens: int | None = None) -> float:
        """Groups of ``n`` responses the KV cache holds at once for prompts of ``prompt_tokens`` (default: the
        recipe's ``max_prompt_length``)."""
        p = self.recipe.prompt if prompt_tokens is None else prompt_tokens
        return self.kv_tokens / (p + self.recipe.n * self.recipe.response)

    def phase(self, gpu: str, phase: str) -> Phase:
        return next(p for p in self.phases if p.gpu == gpu and p.phase == phase)

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.phases) and self.kv_tokens >= self.recipe.prompt + self.recipe.response

    def refusal(self) -> str | None:
        """One line naming the first phase that cannot fit, the GPU and the numbers; None when all fit."""
        g = self.gpu
        for p in self.phases:
            if not p.fits:
                biggest = max(p.parts, key=lambda x: x[1])
                where = "each trainer GPU" if p.gpu == "trainer" else p.gpu.replace("server", "serving GPU")
                return (f"the {p.phase} phase needs {p.need_gib:.1f} GiB on {where} ({g.name}: {g.gib:.1f} GiB) "
                        f"for {self.recipe.model}, largest part {biggest[0]} {biggest[1]:.1f} GiB: lower the "
                        "recipe's micro-batch sizes, lengths or gpu_memory_utilization, or use a larger GPU")  # fmt: skip
        need = self.recipe.prompt + self.recipe.response
        if self.kv_tokens < need:
            return (f"the rollout phase: vLLM's KV cache on a {g.name} holds {self.kv_tokens} tokens "
                    f"({self.kv_gib:.1f} GiB at gpu_memory_utilization={self.recipe.gpu_util:g}), fewer than one "
                    f"prompt and response ({need}): raise worker.rollout.gpu_memory_utilization or use a larger GPU")  # fmt: skip
        return None

    def summary(self) -> str:
        """One line for the job's log."""
        needs = ", ".join(f"{p.phase if p.gpu == 'trainer' else p.gpu} {p.need_gib:.1f}" for p in self.phases)
        return (
            f"every phase fits a {self.gpu.name} ({self.gpu.gib:.1f} GiB): {needs} GiB; vLLM KV "
            f"{self.kv_tokens / 1000:.0f}k tokens = {self.groups():.1f} groups of {self.recipe.n} at "
            f"{self.recipe.prompt}-token prompts"
        )

    def to_json(self) -> dict[str, Any]:
        r = self.recipe
        return {
            "gpu": asdict(self.gpu) | {"gib": round(self.gpu.gib, 2)},
            "model": r.model, "params": r.shape.params, "lora_params": r.lora_params, "trainer_gpus": r.world,
            "fits": self.fits, "refusal": self.refusal(),
            "phases": [{"gpu": p.gpu, "phase": p.phase, "need_gib": round(p.need_gib, 2), "fits": p.fits,
                        "parts": [{"part": n, "gib": round(v, 3), "why": w} for n, v, w in p.parts]}
                       for p in self.phases],
            "vllm": {"kv_gib": round(self.kv_gib, 2), "kv_tokens": self.kv_tokens, "group_tokens": self.group_tokens,
                     "groups_in_flight": round(self.groups(), 2), "n": r.n},
            "notes": self.notes,
        }  # fmt: skip


@dataclass(frozen=True)
class ServerPlan:
    """The judge and embedder servers: their models, memory shares and how many GPUs they spread over."""

    judge_model: str = settings.Models().judge_model
    embed_model: str = settings.Models().embed_model
    judge_util: float = settings.Servers().judge_gpu_util
    embed_util: float = settings.Servers().embed_gpu_util
    serve_gpus: int = settings.Layout().serve_gpus
    judge_replicas: int = settings.Layout().judge_replicas

    def gpus(self) -> list[list[tuple[str, str, float]]]:
        """Per serving GPU, its servers as (name, model, share): judge replica i on GPU i, the embedder on the last
        (the split of ``launch/layout.py``)."""
        out: list[list[tuple[str, str, float]]] = [[] for _ in range(self.serve_gpus)]
        for i in range(min(self.judge_replicas, self.serve_gpus)):
            out[i].append((f"judge{i + 1 if i else ''}", self.judge_model, self.judge_util))
        out[-1].append(("embed", self.embed_model, self.embed_util))
        return out


def estimate(r: GpuRecipe, gpu: Gpu, servers: ServerPlan | None = None) -> GpuBudget:
    """The recipe's phases on ``gpu`` (see the module docstring for every part)."""
    s, w, cap = r.shape, r.world, gpu.gib
    gib = lambda b: b / GIB  # noqa: E731
    lora = r.lora_params > 0
    if lora:
        weights = ("base weights (bf16 shard)", 0.0 if r.offload_params else gib(s.params * 2 / w),
                   f"{s.params / 1e9:.2f}B frozen params x 2 B / {w} GPUs (FSDP full shard)")  # fmt: skip
        trainable, what = r.lora_params, f"LoRA rank {r.lora_rank}: {r.lora_params / 1e6:.1f}M params"
    else:
        weights = ("weights (fp32 shard)", 0.0 if r.offload_params else gib(s.params * 4 / w),
                   f"{s.params / 1e9:.2f}B params x 4 B / {w} GPUs")  # fmt: skip
        trainable = s.params - (s.vision_params if r.freeze_vision else 0)
        what = f"{trainable / 1e9:.2f}B trainable params"
    per = 8 if r.offload_optimizer else 16
    state = (
        "trainable + grads + AdamW",
        gib(trainable * per / w),
        f"{what} x {per} B (fp32 param, grad{', AdamW moments' if per == 16 else '; moments offloaded'}) / {w}",
    )
    ref = []
    if r.use_kl_loss and not lora:
        ref = [("reference model (bf16 shard)", gib(s.params * 2 / w), f"{s.params / 1e9:.2f}B x 2 B / {w}")]
    ctx = ("trainer context", TRAINER_CONTEXT_GIB, "CUDA context, NCCL buffers, allocator slack")
    resident = [weights, state, *ref, ctx]
    root = s.embedding_params * (1 if s.tie_embeddings else 2)
    gather = gib((root - root / w + 2 * s.layer_params) * 2)
    fsdp = ("FSDP gather", gather, "embeddings + LM head unsharded, 2 decoder layers in flight (bf16)")
    asleep = ("vLLM asleep", VLLM_ASLEEP_GIB, "sleep(level=1) frees weights and KV; graphs' pools stay")

    # rollout: vLLM's share next to the trainer's resident state
    share = r.gpu_util * cap
    v_weights = gib(s.params * 2 / r.tensor_parallel)
    v_lora = gib(r.lora_params * 2)
    v_act = gib(vllm_act_bytes_per_token(s) * r.max_batched_tokens / r.tensor_parallel)
    v_fixed = VLLM_NON_TORCH_GIB + (0.0 if r.enforce_eager else VLLM_GRAPHS_GIB)
    kv = max(0.0, share - v_weights - v_lora - v_act - v_fixed)
    kv_tokens = int(kv * GIB // (s.kv_bytes_per_token() / r.tensor_parallel))
    group = r.prompt + r.n * r.response
    vllm_parts = [
        ("vLLM weights", v_weights, f"{s.params / 1e9:.2f}B x 2 B / TP {r.tensor_parallel}"),
        *([("vLLM LoRA slot", v_lora, "the adapter in bf16")] if lora else []),
        ("vLLM activations", v_act, f"profile forward of max_num_batched_tokens={r.max_batched_tokens}"),
        ("vLLM graphs + non-torch", v_fixed, "CUDA graphs, its context, NCCL" if not r.enforce_eager else "context"),
        ("vLLM KV cache", kv, f"{kv_tokens / 1000:.0f}k tokens x {s.kv_bytes_per_token() // 1024} KiB; "
         f"{kv_tokens / group:.1f} groups of {r.n} x ({r.prompt} + {r.n} x {r.response})"),
    ]  # fmt: skip
    rollout = Phase("trainer", "rollout", [*resident, *vllm_parts], cap)

    # log-prob: no gradients; the logits over every token of the micro-batch
    t_exp = r.micro_experience * (r.prompt + r.response)
    pix = lambda seqs: gib(seqs * r.limit_images * r.max_pixels * PIXEL_GPU_BYTES)  # noqa: E731
    logits_exp = gib(t_exp * s.vocab * 2)
    logprob = Phase("trainer", "log-prob", [*resident, fsdp, asleep,
        ("logits (bf16)", logits_exp, f"{t_exp} tokens ({r.micro_experience} x {r.prompt + r.response}) x vocab "
         f"{s.vocab} x 2 B"),
        ("last hidden states", gib(t_exp * s.hidden * 2), f"{t_exp} tokens x {s.hidden} x 2 B"),
        ("pixel values", pix(r.micro_experience), f"{r.micro_experience} prompts x {r.limit_images} pages x "
         f"{r.max_pixels} px x {PIXEL_GPU_BYTES} B"),
    ], cap)  # fmt: skip

    # update: one micro-batch forward and backward
    t_up = r.micro_update * (r.prompt + r.response)
    logits_up = gib(t_up * s.vocab * 2)
    layer = gib(train_layer_bytes_per_token(s) * t_up)
    if r.gradient_checkpointing:
        kept = ("checkpointed layer inputs", gib(s.layers * t_up * s.hidden * 2),
                f"{s.layers} layers x {t_up} tokens x {s.hidden} x 2 B")  # fmt: skip
        peak = max(2 * logits_up, layer)
        transient = ("logits + their gradient" if peak == 2 * logits_up else "one layer recomputed", peak,
                     f"max(2 x logits {logits_up:.1f}, one layer's backward {layer:.1f})")  # fmt: skip
    else:
        kept = ("layer activations (no checkpointing)", s.layers * layer, f"{s.layers} layers x {layer:.1f} GiB")
        transient = ("logits + their gradient", 2 * logits_up, f"2 x {logits_up:.1f} GiB")
    update = Phase("trainer", "update", [*resident, fsdp, asleep, kept, transient,
        ("pixel values", pix(r.micro_update), f"{r.micro_update} prompt(s) x {r.limit_images} pages x "
         f"{r.max_pixels} px x {PIXEL_GPU_BYTES} B"),
    ], cap)  # fmt: skip
    phases = [rollout, logprob, update]
    notes = [f"update micro-batch {t_up} tokens ({r.micro_update} x {r.prompt + r.response}); logits "
             f"{logits_up:.1f} GiB bf16" + ("" if r.gradient_checkpointing else "; gradient checkpointing is off")]  # fmt: skip
    if lora and r.use_kl_loss:
        notes.append("no separate reference model: EasyR1 computes the reference log-probs with the adapter disabled")

    for i, on_gpu in enumerate((servers or ServerPlan()).gpus()):
        parts = []
        for name, model, util in on_gpu:
            b = _billions(model)
            need_w = (b or 0) * 1e9 * 2 / GIB
            if b is not None and util * cap < need_w + SERVER_MIN_GIB:
                notes.append(f"{name} ({model}): its share {util:g} x {cap:.1f} GiB = {util * cap:.1f} GiB cannot "
                             f"hold its bf16 weights {need_w:.1f} GiB + {SERVER_MIN_GIB:g} GiB")  # fmt: skip
                parts.append((f"{name} share (too small)", cap + 1e-6, f"{util:g} x GPU < weights {need_w:.1f} GiB"))
                continue
            w_txt = f"; weights {need_w:.1f} GiB" if b is not None else ""
            parts.append((f"{name} share", util * cap, f"{model}: gpu-memory-utilization {util:g}{w_txt}"))
        phases.append(Phase(f"server {i + 1}", "serving", parts, cap))
    return GpuBudget(gpu, r, phases, kv, kv_tokens, group, notes)


def budget_from_recipe(recipe: str | Path, overrides: list[str] | None, gpu: Gpu, world: int | None = None,
                       servers: ServerPlan | None = None) -> GpuBudget:  # fmt: skip
    """:func:`estimate` for a recipe file and its overrides."""
    return estimate(read_recipe(recipe, overrides, world), gpu, servers)


# --------------------------------------------------------------------------------------------- output
def render(b: GpuBudget, file=None) -> None:
    """The rich table: one block of rows per phase and GPU, its total against the GPU."""
    from rich.console import Console
    from rich.table import Table

    r = b.recipe
    t = Table(title=f"GPU memory: {r.model} on {r.world} x {b.gpu.name} trainer GPU(s) ({b.gpu.gib:.1f} GiB, "
              f"{b.gpu.nominal} nominal)", title_justify="left")  # fmt: skip
    for col, kw in (("GPU", {}), ("phase", {}), ("part", {}), ("GiB", {"justify": "right"}), ("why", {})):
        t.add_column(col, **kw)
    for p in b.phases:
        for name, g, why in p.parts:
            t.add_row(p.gpu, p.phase, name, f"{g:.1f}", why)
        verdict = "[green]fits[/green]" if p.fits else "[red]does not fit[/red]"
        t.add_row(p.gpu, p.phase, f"[bold]total[/bold] ({verdict})", f"[bold]{p.need_gib:.1f}[/bold]",
                  f"of {p.capacity_gib:.1f} GiB: {p.capacity_gib - p.need_gib:+.1f} GiB left", end_section=True)  # fmt: skip
    console = Console(file=file or sys.stdout, width=160)
    console.print(t)
    for n in b.notes:
        console.print(f"note: {n}", highlight=False)
    console.print(f"vLLM KV cache: {b.kv_gib:.1f} GiB = {b.kv_tokens} tokens; {b.groups():.1f} groups of {r.n} in "
                  f"flight at {r.prompt}-token prompts", highlight=False)  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``gpu`` sub-command's options (``python -m launch.budget gpu``)."""
    d = ServerPlan()
    p.add_argument("--recipe", required=True, help="EasyR1 recipe YAML (e.g. recipes/qwen3vl_8b_grpo.yaml)")
    p.add_argument("--gpu", required=True, help=f"the GPU kind: {', '.join(GPUS)}")
    p.add_argument("--train-gpus", type=positive_int, help="trainer GPUs in all (default: the recipe's "
                   "trainer.n_gpus_per_node x trainer.nnodes)")  # fmt: skip
    p.add_argument(
        "--judge-util",
        type=bounded_float(0.01, 1.0),
        default=d.judge_util,
        help=f"the judge's vLLM share (QUOTECITE_JUDGE_GPU_UTIL; default {d.judge_util:g})",
    )
    p.add_argument(
        "--embed-util",
        type=bounded_float(0.01, 1.0),
        default=d.embed_util,
        help=f"the embedder's vLLM share (QUOTECITE_EMBED_GPU_UTIL; default {d.embed_util:g})",
    )
    p.add_argument("--serve-gpus", type=positive_int, default=1, help="GPUs of the servers (QUOTECITE_SERVE_GPUS)")
    p.add_argument("--judge-replicas", type=positive_int, default=1, help="judge servers (QUOTECITE_JUDGE_REPLICAS)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("overrides", nargs="*", help="EasyR1 key=value overrides, as the launch passes them")


def run(args: argparse.Namespace) -> int:
    """Print the budget; exit 3 with one ``error:`` line when a phase cannot fit."""
    servers = ServerPlan(judge_util=args.judge_util, embed_util=args.embed_util, serve_gpus=args.serve_gpus,
                         judge_replicas=min(args.judge_replicas, args.serve_gpus))  # fmt: skip
    b = budget_from_recipe(args.recipe, args.overrides, find_gpu(args.gpu), args.train_gpus, servers)
    if args.json:
        print(json.dumps(b.to_json(), indent=1))
    else:
        render(b)
    why = b.refusal()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 3
    return 0
