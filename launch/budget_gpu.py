"""GPU memory of a training run, per phase and GPU: ``python -m launch.budget gpu`` (docs/cluster.md, "GPU memory").

A trainer GPU has three phases: ``rollout`` (vLLM generates while the trainer's shards stay), ``log-prob`` (the old
and reference log-probs) and ``update`` (forward and backward of one micro-batch); a serving GPU holds the judge and
embedder servers. The numbers come from the model's shapes, the recipe, EasyR1 at b44b311 (``verl/``) and the
constants below. Per trainer GPU, with FSDP ``FULL_SHARD`` over the ``W`` trainer GPUs:

- *base weights*: with LoRA every frozen parameter is cast to bf16 (``fsdp_workers._build_model_optimizer``), params
  x 2 / W; without, the actor is fp32 (``fsdp.torch_dtype``'s default), params x 4 / W; 0 with ``offload_params``.
- *trainable state*: fp32 parameter, gradient and AdamW's two moments, 16 bytes each / W (gradients are freed between
  steps: an upper bound); 8 with ``offload_optimizer``. With LoRA the adapter, else all but a frozen vision tower.
- *reference model*: none with LoRA (EasyR1 disables the adapter); else, with ``use_kl_loss``, bf16 params x 2 / W.
- *FSDP gather*: the root unit (embeddings, LM head) unsharded for the whole forward and backward, plus two decoder
  layers (computing, prefetched); outside the rollout also what a sleeping vLLM keeps.
- *rollout*: vLLM takes ``gpu_memory_utilization`` x the whole GPU (not of what is free): weights / TP, the LoRA
  slot, the profile run's activations, graphs and non-torch memory; the rest is KV cache. A group of ``n`` responses
  to a prompt of P tokens holds ``P + n x max_response_length`` tokens (prefix caching keeps P once).
- *log-prob*: dynamic batching packs ``micro_batch_size_per_device_for_experience x (prompt + response)`` tokens into
  one forward without gradients: the bf16 logits over every token (the patched Qwen3-VL forward returns them all),
  the last hidden states and the micro-batch's ``pixel_values``.
- *update*: ``micro_batch_size_per_device_for_update x (prompt + response)`` tokens. With gradient checkpointing each
  layer keeps its input, then the larger of the logits with their gradient (flash-attn's cross-entropy backward
  overwrites the logits, the in-place ``div_(temperature)`` adds one gradient: 2 x logits) and one layer recomputed;
  without, every layer keeps its activations.
- *servers*: each ``vllm serve`` takes its ``--gpu-memory-utilization`` x the GPU; a share must hold the model's
  bf16 weights plus :data:`SERVER_MIN_GIB`, and the shares of one GPU must add up to at most the GPU.

Against issue 31's figures for the 8B recipe on 2 H200s (paper estimates; the tests check each within 15 %) this
gives 56 GiB for the update, not 50-55 (it also counts the logits' gradient, the context, the gather and the sleeping
vLLM), and 45 for log-prob, not 50 (no second logits-sized tensor). Not counted: autograd's ``CopySlices`` for the
in-place division may briefly hold one or two more logits-sized gradients (the update's margin on an 80 GB GPU is the
first to check on a real run), and the frozen vision tower's activations.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import read_json
from launch import settings
from recipes.reader import RecipeError, dig, load_recipe

GIB = 2**30
MIB = 2**20

# ----------------------------------------------------------------------------- assumptions (see the docstring)
TRAINER_CONTEXT_GIB = 2.0  # CUDA context (about 0.5 GiB on Hopper), NCCL buffers, the caching allocator's slack
VLLM_ASLEEP_GIB = 1.0  # what an engine in sleep(level=1) keeps: its CUDA graphs' pools, sampler buffers
VLLM_NON_TORCH_GIB = 1.0  # vLLM's memory outside torch's allocator: its CUDA context, NCCL, cuBLAS workspaces
VLLM_GRAPHS_GIB = 1.0  # vLLM's CUDA graphs (0 with enforce_eager)
PIXEL_GPU_BYTES = 36  # pixel_values per pixel: float32 x 3 channels x temporal_patch_size 2, plus the bf16 copy
SERVER_MIN_GIB = 4.0  # a server's share beyond its weights: the least KV cache, activations and graphs it starts with


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
SLURM_GPU_VARIABLES = ("SLURM_GPUS_PER_NODE", "SLURM_TRES_PER_NODE", "SLURM_GPUS")
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")  # <pci id>/information holds "Model: NVIDIA H200"


def find_gpu(name: str) -> Gpu:
    """The GPU named ``name``: a key of :data:`GPUS` or a name :func:`gpu_from_model_name` knows (``A100-80GB``)."""
    gpu = GPUS.get(name.lower()) or gpu_from_model_name(name)
    if gpu is None:
        raise InputError(f"--gpu {name!r}: not a known GPU (known: {', '.join(GPUS)})")
    return gpu


def gpu_from_slurm(environ) -> tuple[Gpu | None, str]:
    """(the GPU kind the job's Slurm variables name: ``gpu:h200:3``, ``gres/gpu:h200=3``, where), or (None, why not)."""
    for var in SLURM_GPU_VARIABLES:
        for part in (p.strip() for p in re.split(r"[,:=/]", environ.get(var) or "")):
            if part and not part.isdigit() and part not in ("gpu", "gres"):
                try:
                    return find_gpu(part), f"{var}={environ[var]}"
                except InputError:
                    continue
    return None, f"no GPU type in {', '.join(SLURM_GPU_VARIABLES)}"


def gpu_from_model_name(model: str) -> Gpu | None:
    """The kind a driver's model name stands for; None when none or ambiguous (an H100 NVL's 94 GB, a GH200's 96 or
    144 GB: not the H200 its name contains)."""
    k = re.sub(r"[^a-z0-9]", "", model.lower())
    if "gh200" in k or "gb200" in k:
        return None
    if "a100" in k:
        return GPUS["a100-80g"] if "80g" in k else GPUS["a100-40g"] if "40g" in k else None
    for key in ("h200", "l40s"):
        if key in k:
            return GPUS[key]
    return GPUS["h100"] if "h100" in k and "nvl" not in k else None


def gpu_from_driver(root: Path = DRIVER_GPUS) -> tuple[Gpu | None, str]:
    """(the smallest GPU kind the driver lists on this node, where), or (None, why not): a file read, no process,
    so the dry run on the same node decides the same."""
    found, unknown = [], []
    for info in sorted(root.glob("*/information")) if root.is_dir() else []:
        try:
            m = re.search(r"^Model:\s*(.+)$", info.read_text(errors="replace"), re.M)
        except OSError:
            continue
        if m:
            gpu = gpu_from_model_name(m.group(1).strip())
            (found if gpu else unknown).append(gpu or m.group(1).strip())
    if unknown:
        return None, f"{root}: {unknown[0]} is not a GPU kind the budget knows"
    if found:
        return min(found, key=lambda g: g.mib), f"{root}: {found[0].name}"
    return None, f"no NVIDIA GPU listed in {root}"


# --------------------------------------------------------------------------------------------- model shapes
@dataclass(frozen=True)
class ModelShape:
    """A (vision-)language model's shapes (``vision_depth`` 0: no vision tower); :attr:`params` counts as
    transformers' ``Qwen3VLForConditionalGeneration`` does (checked in ``tests/launch/test_budget_gpu.py``)."""

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
        return 2 * h * (self.q + self.kv) + 2 * self.head_dim + 3 * h * self.intermediate + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def vision_params(self) -> int:
        """Patch and position embeddings, the blocks and the patch mergers (the main one, one per deepstack layer)."""
        if not self.vision_depth:
            return 0
        vh, vi, mh = self.vision_hidden, self.vision_intermediate, self.vision_hidden * self.spatial_merge**2
        patch = vh * self.in_channels * self.temporal_patch_size * self.patch_size**2 + vh
        block = 4 * vh * vh + 2 * vh * vi + 9 * vh + vi
        linears = mh * mh + mh + self.vision_out * mh + self.vision_out
        mergers = 2 * vh + linears + self.deepstack * (2 * mh + linears)
        return patch + self.vision_positions * vh + self.vision_depth * block + mergers

    @property
    def params(self) -> int:
        embeddings = self.embedding_params * (1 if self.tie_embeddings else 2)
        return embeddings + self.layers * self.layer_params + self.hidden + self.vision_params

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token."""
        return 2 * self.layers * self.kv * dtype_bytes

    def lora_params(self, rank: int, targets: str = "all-linear") -> int:
        """A LoRA adapter of ``rank`` on the language model's linears, ``rank x (in + out)`` each (PEFT's
        ``all-linear``: every linear but the LM head; the recipe keeps the vision tower out)."""
        h, i = self.hidden, self.intermediate
        shapes = {"q_proj": (h, self.q), "k_proj": (h, self.kv), "v_proj": (h, self.kv), "o_proj": (self.q, h)}
        shapes |= {"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
        names = [t.strip() for t in targets.split(",") if t.strip()]
        names = list(shapes) if names == ["all-linear"] else names
        unknown = [n for n in names if n not in shapes]
        if unknown:
            raise InputError(f"lora.target_modules: {', '.join(unknown)} not among {', '.join(shapes)}")
        return self.layers * sum(rank * sum(shapes[n]) for n in names)


QWEN3_VL_8B = ModelShape(
    vocab=151_936, hidden=4096, intermediate=12_288, layers=36, heads=32, kv_heads=8, head_dim=128,
    vision_depth=27, vision_hidden=1152, vision_intermediate=4304, vision_out=4096, vision_positions=2304,
    deepstack=3,
)  # fmt: skip
"""Qwen3-VL-8B-Instruct's ``config.json``: 8,767,123,696 parameters (the published 8.77B)."""
KNOWN_SHAPES = {"qwen3-vl-8b-instruct": QWEN3_VL_8B, "qwen3-vl-8b-thinking": QWEN3_VL_8B}
"""By the model id's last component, lower case; any other model is read from its local ``config.json``."""
VISION_KEYS = {
    "vision_depth": "depth",
    "vision_hidden": "hidden_size",
    "vision_intermediate": "intermediate_size",
    "patch_size": "patch_size",
    "temporal_patch_size": "temporal_patch_size",
    "in_channels": "in_channels",
    "spatial_merge": "spatial_merge_size",
    "vision_positions": "num_position_embeddings",
}
""":class:`ModelShape` field -> its key in a ``vision_config`` (absent: the field's default)."""


def shape_from_config(cfg: dict, where: str = "config.json") -> ModelShape:
    """The shapes in a Hugging Face ``config.json`` (``text_config``/``vision_config``, or the top level)."""
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: not a JSON object")
    text, vision = cfg.get("text_config") or cfg, cfg.get("vision_config") or {}
    try:
        heads, hidden = int(text["num_attention_heads"]), int(text["hidden_size"])
        return ModelShape(
            vocab=int(text["vocab_size"]),
            hidden=hidden,
            intermediate=int(text["intermediate_size"]),
            layers=int(text["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads),
            tie_embeddings=bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))),
            vision_out=int(vision.get("out_hidden_size", hidden) if vision else 0),
            deepstack=len(vision.get("deepstack_visual_indexes") or []),
            **{field: int(vision[key]) for field, key in VISION_KEYS.items() if key in vision},
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{where}: not a transformer config with layer shapes ({type(e).__name__}: {e})") from None


def model_name(model: str) -> str:
    """A model id's last component, lower case: the key of :data:`KNOWN_SHAPES`."""
    return model.rstrip("/").rsplit("/", 1)[-1].lower()


def model_shape(model: str) -> ModelShape | None:
    """The shapes of ``model``: a local folder's ``config.json``, else :data:`KNOWN_SHAPES`; None when neither."""
    cfg = Path(model) / "config.json"
    if cfg.is_file():
        return shape_from_config(read_json(cfg, "model config"), str(cfg))
    return KNOWN_SHAPES.get(model_name(model))


def params_b_from_id(model: str) -> float | None:
    """The parameter count in billions a model id carries (the larger of several, as in ``Qwen3-30B-A3B``)."""
    found = re.findall(r"(?<![\d.])(\d+(?:\.\d+)?)b(?![a-z])", model_name(model))
    return max(map(float, found)) if found else None


# --------------------------------------------------------------------------------------------- the recipe
def setting(recipe: dict, key: str, default: Any, kind: type = int) -> Any:
    """The recipe's ``key`` as ``kind`` (``default`` when absent or null; None when both are)."""
    v = dig(recipe, key, None)
    v = default if v is None else v
    if v is None:
        return None
    try:
        if isinstance(v, bool) and kind is not bool:
            raise ValueError
        return kind(v)
    except (TypeError, ValueError):
        raise InputError(f"recipe {key}={v!r}: expected {kind.__name__}") from None


def load_policy_recipe(path: str | Path, overrides: list[str] | None = None) -> tuple[dict, str]:
    """The recipe with EasyR1 ``key=value`` overrides applied, and its policy (``worker.actor.model.model_path``)."""
    try:
        r = load_recipe(path, overrides or [])
    except RecipeError as e:
        raise InputError(str(e)) from None
    model = dig(r, "worker.actor.model.model_path")
    if not isinstance(model, str) or not model:
        raise InputError(f"recipe {path}: no worker.actor.model.model_path")
    return r, model


def _from(key: str, default: Any) -> Any:
    """A :class:`GpuRecipe` field read from the recipe's ``key``; EasyR1's ``default`` (and type) when it says none."""
    return field(default=default, metadata={"key": key})


@dataclass(frozen=True)
class GpuRecipe:
    """What the GPU estimates read from a recipe."""

    model: str
    shape: ModelShape
    world: int
    offload_params: bool
    use_kl_loss: bool
    prompt: int = _from("data.max_prompt_length", 512)
    response: int = _from("data.max_response_length", 512)
    micro_update: int = _from("worker.actor.micro_batch_size_per_device_for_update", 4)
    micro_experience: int = _from("worker.actor.micro_batch_size_per_device_for_experience", 16)
    lora_rank: int = _from("worker.actor.model.lora.rank", 0)
    lora_targets: str = _from("worker.actor.model.lora.target_modules", "all-linear")
    gradient_checkpointing: bool = _from("worker.actor.model.enable_gradient_checkpointing", True)
    freeze_vision: bool = _from("worker.actor.model.freeze_vision_tower", False)
    offload_optimizer: bool = _from("worker.actor.offload.offload_optimizer", False)
    n: int = _from("worker.rollout.n", 1)
    gpu_util: float = _from("worker.rollout.gpu_memory_utilization", 0.6)
    tensor_parallel: int = _from("worker.rollout.tensor_parallel_size", 2)
    max_batched_tokens: int = _from("worker.rollout.max_num_batched_tokens", 8192)
    enforce_eager: bool = _from("worker.rollout.enforce_eager", False)
    limit_images: int = _from("worker.rollout.limit_images", 0)
    max_pixels: int = _from("data.max_pixels", 4_194_304)

    @property
    def lora_params(self) -> int:
        return self.shape.lora_params(self.lora_rank, self.lora_targets) if self.lora_rank > 0 else 0


def read_recipe(path: str | Path, overrides: list[str] | None = None, world: int | None = None) -> GpuRecipe:
    """The recipe's lengths, batch sizes and switches; ``world`` replaces ``n_gpus_per_node x nnodes``."""
    r, model = load_policy_recipe(path, overrides)
    shape = model_shape(model)
    if shape is None:
        raise InputError(f"model {model!r}: its shapes are unknown (known: {', '.join(KNOWN_SHAPES)}); point "
                         "worker.actor.model.model_path at a local folder with its config.json")  # fmt: skip

    def flag(key: str) -> bool:
        return setting(r, key, False, bool)

    g = GpuRecipe(
        model=model,
        shape=shape,
        world=world or setting(r, "trainer.n_gpus_per_node", 8) * setting(r, "trainer.nnodes", 1),
        offload_params=flag("worker.actor.offload.offload_params") or flag("worker.actor.fsdp.enable_cpu_offload"),
        use_kl_loss=flag("algorithm.use_kl_loss") and not flag("algorithm.disable_kl"),
        **{f.name: setting(r, f.metadata["key"], f.default, type(f.default)) for f in fields(GpuRecipe) if f.metadata},
    )
    keys = {f.name: f.metadata["key"] for f in fields(g) if f.metadata}
    trainer_gpus = {"trainer GPUs (n_gpus_per_node x nnodes)": g.world}
    at_least_1(path, {**trainer_gpus, **{keys[name]: getattr(g, name) for name in _AT_LEAST_1}})
    if not 0 < g.gpu_util <= 1:
        raise InputError(
            f"recipe {path}: worker.rollout.gpu_memory_utilization={g.gpu_util}: expected more than 0, at most 1"
        )
    return g


def at_least_1(path: str | Path, numbers: dict[str, int]) -> None:
    """Refuse, naming each, the recipe's numbers (key -> value) a budget divides by or counts with when below 1."""
    bad = [f"{key}={value}" for key, value in numbers.items() if value < 1]
    if bad:
        raise InputError(f"recipe {path}: {', '.join(bad)}: expected at least 1")


_AT_LEAST_1 = ("prompt", "response", "micro_update", "micro_experience", "n", "tensor_parallel", "max_batched_tokens")
"""The recipe's numbers the estimate divides by or counts with (``limit_images`` and ``lora_rank`` may be 0)."""


# --------------------------------------------------------------------------------------------- the estimate
Part = tuple[str, float, str]
"""(part, GiB, why): a row of a budget, host memory's as the GPU's."""


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]], right: int) -> list[str]:
    """Columns two spaces apart, column ``right`` aligned right, the last one not padded."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    lines = []
    for row in (header, *rows):
        cells = [
            c.rjust(w) if i == right else c.ljust(w) for i, (c, w) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        lines.append("  ".join([*cells, row[-1]]))
    return lines


@dataclass
class Phase:
    """One phase on one GPU (``trainer``: each of them, or ``server N``) and its parts."""

    gpu: str
    phase: str
    parts: list[Part]
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
    notes: list[str]

    def groups(self, prompt_tokens: int | None = None) -> float:
        """Groups of ``n`` the KV cache holds at once for prompts of ``prompt_tokens`` (default: the recipe's)."""
        p = self.recipe.prompt if prompt_tokens is None else prompt_tokens
        return self.kv_tokens / (p + self.recipe.n * self.recipe.response)

    def phase(self, gpu: str, phase: str) -> Phase:
        return next(p for p in self.phases if p.gpu == gpu and p.phase == phase)

    @property
    def fits(self) -> bool:
        return self.refusal() is None

    def refusal(self) -> str | None:
        """One line naming the first phase that cannot fit, the GPU and the numbers; None when all fit."""
        g, r = self.gpu, self.recipe
        for p in self.phases:
            if not p.fits:
                name, gib, _ = max(p.parts, key=lambda x: x[1])
                where = "each trainer GPU" if p.gpu == "trainer" else p.gpu.replace("server", "serving GPU")
                return (f"the {p.phase} phase needs {p.need_gib:.1f} GiB on {where} ({g.name}: {g.gib:.1f} GiB) "
                        f"for {r.model}, largest part {name} {gib:.1f} GiB: lower the recipe's micro-batch sizes, "
                        "lengths or gpu_memory_utilization, or use a larger GPU")  # fmt: skip
        if self.kv_tokens < r.prompt + r.response:
            return (f"the rollout phase: vLLM's KV cache on a {g.name} holds {self.kv_tokens} tokens "
                    f"({self.kv_gib:.1f} GiB at gpu_memory_utilization={r.gpu_util:g}), fewer than one prompt and "
                    f"response ({r.prompt + r.response}): raise worker.rollout.gpu_memory_utilization or use a "
                    "larger GPU")  # fmt: skip
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
        phases = [
            {"gpu": p.gpu, "phase": p.phase, "need_gib": round(p.need_gib, 2), "fits": p.fits,
             "parts": [{"part": n, "gib": round(v, 3), "why": w} for n, v, w in p.parts]}
            for p in self.phases
        ]  # fmt: skip
        vllm = {"kv_gib": round(self.kv_gib, 2), "kv_tokens": self.kv_tokens, "group_tokens": self.group_tokens,
                "groups_in_flight": round(self.groups(), 2), "n": r.n}  # fmt: skip
        return {"gpu": asdict(self.gpu) | {"gib": round(self.gpu.gib, 2)}, "model": r.model, "params": r.shape.params,
                "lora_params": r.lora_params, "trainer_gpus": r.world, "fits": self.fits, "refusal": self.refusal(),
                "phases": phases, "vllm": vllm, "notes": self.notes}  # fmt: skip

    def table(self) -> str:
        """One block of rows per phase and GPU, its total against the GPU; then the notes and the KV cache."""
        g, r = self.gpu, self.recipe
        rows = []
        for p in self.phases:
            rows += [(p.gpu, p.phase, name, f"{gib:.1f}", why) for name, gib, why in p.parts]
            left = f"of {p.capacity_gib:.1f} GiB: {p.capacity_gib - p.need_gib:+.1f} GiB left"
            verdict = "fits" if p.fits else "does not fit"
            rows.append((p.gpu, p.phase, f"total ({verdict})", f"{p.need_gib:.1f}", left))
        title = f"GPU memory: {r.model} on {r.world} x {g.name} trainer GPU(s) ({g.gib:.1f} GiB, {g.nominal} nominal)"
        notes = [f"note: {n}" for n in self.notes]
        kv = (
            f"vLLM KV cache: {self.kv_gib:.1f} GiB = {self.kv_tokens} tokens; {self.groups():.1f} groups of {r.n} "
            f"in flight at {r.prompt}-token prompts"
        )
        return "\n".join([title, *text_table(("GPU", "phase", "part", "GiB", "why"), rows, 3), *notes, kv])


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
        """Per serving GPU its servers as (name, model, share): judge replica i on GPU i, the embedder on the last
        (``launch/layout.py``'s split)."""
        out: list[list[tuple[str, str, float]]] = [[] for _ in range(self.serve_gpus)]
        for i in range(min(self.judge_replicas, self.serve_gpus)):
            out[i].append((f"judge{i + 1 if i else ''}", self.judge_model, self.judge_util))
        out[-1].append(("embed", self.embed_model, self.embed_util))
        return out


def _server_phase(i: int, on_gpu: list[tuple[str, str, float]], cap: float, notes: list[str]) -> Phase:
    """Serving GPU ``i``: each server's share; a share too small for its weights counts as more than the GPU."""
    parts = []
    for name, model, util in on_gpu:
        b = params_b_from_id(model)
        weights = (b or 0) * 1e9 * 2 / GIB
        if b is not None and util * cap < weights + SERVER_MIN_GIB:
            notes.append(f"{name} ({model}): its share {util:g} x {cap:.1f} GiB = {util * cap:.1f} GiB cannot hold "
                         f"its bf16 weights {weights:.1f} GiB + {SERVER_MIN_GIB:g} GiB")  # fmt: skip
            parts.append((f"{name} share (too small)", cap + 1e-6, f"{util:g} x GPU < weights {weights:.1f} GiB"))
        else:
            w_txt = f"; weights {weights:.1f} GiB" if b is not None else ""
            parts.append((f"{name} share", util * cap, f"{model}: gpu-memory-utilization {util:g}{w_txt}"))
    return Phase(f"server {i + 1}", "serving", parts, cap)


def estimate(r: GpuRecipe, gpu: Gpu, servers: ServerPlan | None = None) -> GpuBudget:
    """The recipe's phases on ``gpu`` (every part is in the module docstring)."""
    s, w, cap, lora = r.shape, r.world, gpu.gib, r.lora_params > 0
    billions = f"{s.params / 1e9:.2f}B"
    if lora:
        weights = ("base weights (bf16 shard)", s.params * 2 / w, f"{billions} frozen params x 2 B / {w} GPUs (FSDP "
                   "full shard)")  # fmt: skip
        trainable, what = r.lora_params, f"LoRA rank {r.lora_rank}: {r.lora_params / 1e6:.1f}M params"
    else:
        weights = ("weights (fp32 shard)", s.params * 4 / w, f"{billions} params x 4 B / {w} GPUs")
        trainable = s.params - (s.vision_params if r.freeze_vision else 0)
        what = f"{trainable / 1e9:.2f}B trainable params"
    per = 8 if r.offload_optimizer else 16
    kept = ", AdamW moments" if per == 16 else "; moments offloaded"
    resident = [
        (weights[0], 0.0 if r.offload_params else weights[1] / GIB, weights[2]),
        ("trainable + grads + AdamW", trainable * per / w / GIB, f"{what} x {per} B (fp32 param, grad{kept}) / {w}"),
    ]
    if r.use_kl_loss and not lora:
        resident.append(("reference model (bf16 shard)", s.params * 2 / w / GIB, f"{billions} x 2 B / {w}"))
    resident.append(("trainer context", TRAINER_CONTEXT_GIB, "CUDA context, NCCL buffers, allocator slack"))
    root = s.embedding_params * (1 if s.tie_embeddings else 2)
    outside_rollout = [
        *resident,
        ("FSDP gather", (root - root / w + 2 * s.layer_params) * 2 / GIB, "embeddings + LM head unsharded, 2 "
         "decoder layers in flight (bf16)"),
        ("vLLM asleep", VLLM_ASLEEP_GIB, "sleep(level=1) frees weights and KV; graphs' pools stay"),
    ]  # fmt: skip

    # rollout: vLLM's share of the whole GPU next to the trainer's resident state; a token of its profile run holds
    # (bf16) the fused gate/up output, the activation, q/k/v and four hidden-size buffers
    tp = r.tensor_parallel
    v_weights, v_lora = s.params * 2 / tp / GIB, r.lora_params * 2 / GIB
    v_act = 2 * (3 * s.intermediate + s.q + 2 * s.kv + 4 * s.hidden) * r.max_batched_tokens / tp / GIB
    v_fixed = VLLM_NON_TORCH_GIB + (0.0 if r.enforce_eager else VLLM_GRAPHS_GIB)
    kv = max(0.0, r.gpu_util * cap - v_weights - v_lora - v_act - v_fixed)
    kv_tokens = int(kv * GIB // (s.kv_bytes_per_token() / tp))
    group = r.prompt + r.n * r.response
    rollout = [
        *resident,
        ("vLLM weights", v_weights, f"{billions} x 2 B / TP {tp}"),
        *([("vLLM LoRA slot", v_lora, "the adapter in bf16")] if lora else []),
        ("vLLM activations", v_act, f"profile forward of max_num_batched_tokens={r.max_batched_tokens}"),
        ("vLLM graphs + non-torch", v_fixed, "context" if r.enforce_eager else "CUDA graphs, its context, NCCL"),
        ("vLLM KV cache", kv, f"{kv_tokens / 1000:.0f}k tokens x {s.kv_bytes_per_token() // 1024} KiB; "
         f"{kv_tokens / group:.1f} groups of {r.n} x ({r.prompt} + {r.n} x {r.response})"),
    ]  # fmt: skip

    def micro_batch(seqs: int) -> tuple[int, float, Part]:
        """(tokens, bf16 logits GiB, the pixel values part) of a micro-batch of ``seqs`` sequences."""
        pixels = seqs * r.limit_images * r.max_pixels * PIXEL_GPU_BYTES / GIB
        why = f"{seqs} prompt(s) x {r.limit_images} pages x {r.max_pixels} px x {PIXEL_GPU_BYTES} B"
        tokens = seqs * (r.prompt + r.response)
        return tokens, tokens * s.vocab * 2 / GIB, ("pixel values", pixels, why)

    # log-prob: no gradients; the logits over every token of the micro-batch
    t_exp, logits_exp, pix_exp = micro_batch(r.micro_experience)
    logprob = [
        *outside_rollout,
        ("logits (bf16)", logits_exp, f"{t_exp} tokens ({r.micro_experience} x {r.prompt + r.response}) x vocab "
         f"{s.vocab} x 2 B"),
        ("last hidden states", t_exp * s.hidden * 2 / GIB, f"{t_exp} tokens x {s.hidden} x 2 B"),
        pix_exp,
    ]  # fmt: skip

    # update: one micro-batch forward and backward; a token of one decoder layer keeps for its backward, with that
    # backward's largest gradient (bf16): q/k/v, attention output and log-sum-exp, six hidden-size tensors, gate, up,
    # activation, product, one gradient
    t_up, logits_up, pix_up = micro_batch(r.micro_update)
    layer = 2 * (2 * s.q + 2 * s.kv + 6 * s.hidden + 5 * s.intermediate) * t_up / GIB
    if r.gradient_checkpointing:
        inputs = s.layers * t_up * s.hidden * 2 / GIB
        kept_part = ("checkpointed layer inputs", inputs, f"{s.layers} layers x {t_up} tokens x {s.hidden} x 2 B")
        name = "logits + their gradient" if 2 * logits_up >= layer else "one layer recomputed"
        why = f"max(2 x logits {logits_up:.1f}, one layer's backward {layer:.1f})"
        transient = (name, max(2 * logits_up, layer), why)
    else:
        kept_part = ("layer activations (no checkpointing)", s.layers * layer, f"{s.layers} layers x {layer:.1f} GiB")
        transient = ("logits + their gradient", 2 * logits_up, f"2 x {logits_up:.1f} GiB")
    update = [*outside_rollout, kept_part, transient, pix_up]

    trainer = {"rollout": rollout, "log-prob": logprob, "update": update}
    phases = [Phase("trainer", name, parts, cap) for name, parts in trainer.items()]
    notes = [f"update micro-batch {t_up} tokens ({r.micro_update} x {r.prompt + r.response}); logits "
             f"{logits_up:.1f} GiB bf16" + ("" if r.gradient_checkpointing else "; gradient checkpointing is off")]  # fmt: skip
    if lora and r.use_kl_loss:
        notes.append("no separate reference model: EasyR1 computes the reference log-probs with the adapter disabled")
    for i, on_gpu in enumerate((servers or ServerPlan()).gpus()):
        phases.append(_server_phase(i, on_gpu, cap, notes))
    return GpuBudget(gpu, r, phases, kv, kv_tokens, group, notes)


def budget_from_recipe(recipe: str | Path, overrides: list[str] | None, gpu: Gpu, world: int | None = None,
                       servers: ServerPlan | None = None) -> GpuBudget:  # fmt: skip
    """:func:`estimate` for a recipe file and its overrides."""
    return estimate(read_recipe(recipe, overrides, world), gpu, servers)
