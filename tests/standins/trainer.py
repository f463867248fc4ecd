"""Stand-in for ``python3 -m verl.trainer.main config=RECIPE key=value ...`` (EasyR1 at b44b311), for the launch tests.

What it copies from EasyR1, because the launch script depends on it:
- the command line: ``config=`` a YAML recipe, then dotted ``key=value`` overrides;
- the ``file`` logger: at start it truncates ``experiment_log.jsonl`` and ``generations.log`` in
  ``trainer.save_checkpoint_path`` (mode ``"w"``), then appends ``{"step": N, ...}`` after each step;
- resume (``find_latest_ckpt``): read ``checkpoint_tracker.json``; if its ``global_step_N`` folder is missing,
  print "Checkpoint does not exist" and start from step 0; with ``val_before_train`` log validation metrics at
  the resume step; loading a checkpoint whose files are incomplete fails (like ``torch.load`` on a torn file);
- saving every ``trainer.save_freq`` steps and at the end: prune to ``save_limit`` first, then
  ``actor/`` shards per rank (``trainer.n_gpus_per_node`` ranks), ``actor/huggingface/``,
  ``actor/lora_adapter/{adapter_model.safetensors,adapter_config.json}``, ``dataloader.pt``, and last the
  tracker (plain ``open("w")``); the step's metrics are logged after its checkpoint, as in ``fit()``;
- no signal handler of its own for SIGTERM (it dies), and it needs as many GPUs in ``CUDA_VISIBLE_DEVICES``
  as ``trainer.n_gpus_per_node``.
What it adds: SIGUSR1 makes it finish the current step, save, and exit 0 (``QUOTECITE_TRAINER_STOP=signal``);
each step calls the judge (chat completions) and the embedder (embeddings) at ``QUOTECITE_JUDGE_URL`` /
``QUOTECITE_EMBED_URL`` and appends the reward's counters to ``$QUOTECITE_METRICS_DIR/reward_counters.jsonl``.
The judge is called through the reward's own client (:class:`reward.judge_http.HttpJudge`) and the embedder failure
through the reward's own ``/health`` wait, both with the recipe's ``worker.reward.reward_function_kwargs.
judge_outage_s``: an outage is waited out exactly as the reward plugin does, and one that outlasts the budget
ends the process with the reward's :class:`~reward.servers.ServerOutageError` and its ``server_outage.json`` (as a
Ray task error ends EasyR1's trainer). ``reward_counters.jsonl`` lines carry ``judge_outages``.

Knobs (environment): ``QUOTECITE_STANDIN_STEP_SECONDS`` (default 1.0); ``QUOTECITE_STANDIN_SLOW_SAVE=STEP:SECONDS``
pauses once, half-way through writing checkpoint STEP (after the shards, before the adapter, ``dataloader.pt`` and
the tracker), so a test can kill the job mid-checkpoint; ``QUOTECITE_STANDIN_FAIL_AT_START=message`` exits 1;
``QUOTECITE_STANDIN_GATE=PATH``: the trainer starts step N only once PATH holds an integer >= N (it waits, polling,
when the file is missing or lower), so a test decides exactly where a job stands when it signals or requeues it,
whatever the machine's speed.
With ``RAY_ADDRESS`` set to a cluster (a job on several trainer nodes) it first joins that Ray cluster as EasyR1's
``ray.init()`` does (with a ``runtime_env`` that forwards only EasyR1's own variables), prints the live nodes and their
GPUs as one ``{"standin": "ray", ...}`` line, and exits 1 unless ``trainer.nnodes`` of them offer
``trainer.n_gpus_per_node`` GPUs each; then, as EasyR1's reward actors do, each step's reward counters are written by
a Ray task on every trainer node, from that task's own environment (``QUOTECITE_METRICS_DIR``, the servers' URLs):
``{"step": N, "nodes": {SLURMD_NODENAME: counters}}``; a worker that does not see the trainer's environment fails the
step. ``RAY_ADDRESS=local`` (one trainer node) starts no Ray unless ``QUOTECITE_STANDIN_RAY_INIT=1``: then it calls
``ray.init()`` as EasyR1 does and prints ``{"standin": "ray-local", "session_dir": ...}`` (the cluster it got).
Metric values are a pure function of the step, so a rerun of a step logs the same numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from reward.pipeline import _report_outage
from reward.servers import ServerOutageError

TRACKER = "checkpoint_tracker.json"
EASYR1_RUNTIME_ENV = {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "WARN",
                      "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
                      "CUDA_DEVICE_MAX_CONNECTIONS": "1", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}  # fmt: skip
"""What EasyR1's ``ray.init(runtime_env=...)`` forwards to its workers (``verl/trainer/main.py``): nothing else."""


def parse_cli(argv: list[str]) -> dict:
    """``config=PATH`` + dotted overrides -> nested dict (values parsed as YAML scalars, like OmegaConf)."""
    cfg: dict = {}
    over = []
    for a in argv:
        k, _, v = a.partition("=")
        if k == "config":
            cfg = yaml.safe_load(Path(v).read_text()) or {}
        else:
            over.append((k, v))
    for k, v in over:
        node = cfg
        *parents, leaf = k.split(".")
        for p in parents:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[leaf] = yaml.safe_load(v) if v else None
    return cfg


def get(cfg: dict, dotted: str, default=None):
    for k in dotted.split("."):
        if not isinstance(cfg, dict) or k not in cfg:
            return default
        cfg = cfg[k]
    return cfg if cfg is not None else default


def metrics(step: int) -> dict:
    return {"actor": {"pg_loss": round(1.0 / step, 6), "lr": 1e-5}, "reward": {"overall": round(step / 100, 4)}}


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Trainer:
    def __init__(self, cfg: dict) -> None:
        self.ckpt = Path(get(cfg, "trainer.save_checkpoint_path"))
        self.max_steps = int(get(cfg, "trainer.max_steps"))
        self.save_freq = int(get(cfg, "trainer.save_freq", -1))
        self.save_limit = int(get(cfg, "trainer.save_limit", -1))
        self.world = int(get(cfg, "trainer.n_gpus_per_node", 8))
        self.find_last = bool(get(cfg, "trainer.find_last_checkpoint", True))
        self.val_before_train = bool(get(cfg, "trainer.val_before_train", False))
        self.lora = int(get(cfg, "worker.actor.model.lora.rank", 0)) > 0
        self.step_seconds = float(os.environ.get("QUOTECITE_STANDIN_STEP_SECONDS", "1.0"))
        self.judge_url = os.environ.get("QUOTECITE_JUDGE_URL", "")
        self.embed_url = os.environ.get("QUOTECITE_EMBED_URL", "")
        self.judge_model = os.environ.get("QUOTECITE_JUDGE_MODEL", "")
        self.metrics_dir = os.environ.get("QUOTECITE_METRICS_DIR", "")
        self.gate = os.environ.get("QUOTECITE_STANDIN_GATE", "")
        self.stop = False
        self.step = 0
        self.cfg = cfg

    # --------------------------------------------------------------- EasyR1's FileLogger
    def start_logger(self) -> None:
        self.ckpt.mkdir(parents=True, exist_ok=True)
        (self.ckpt / "experiment_config.json").write_text(json.dumps(self.cfg, indent=2, default=str))
        for name in ("experiment_log.jsonl", "generations.log"):
            with open(self.ckpt / name, "w"):
                pass

    def log(self, data: dict, step: int) -> None:
        with open(self.ckpt / "experiment_log.jsonl", "a") as f:
            f.write(json.dumps({"step": step, **data}) + "\n")

    # --------------------------------------------------------------- checkpoints
    def load(self) -> None:
        tracker = self.ckpt / TRACKER
        if not self.find_last or not tracker.exists():
            return
        info = json.loads(tracker.read_text())
        path = self.ckpt / f"global_step_{info['last_global_step']}"
        if not path.exists():
            print(f"Checkpoint does not exist: {path}", flush=True)
            return
        print(f"Load from checkpoint: {path}.", flush=True)
        for r in range(self.world):
            for kind in ("model", "optim", "extra_state"):
                f = path / "actor" / f"{kind}_world_size_{self.world}_rank_{r}.pt"
                if not f.is_file():
                    raise SystemExit(f"error: cannot load {f}: no such file (torn checkpoint)")
        state = json.loads((path / "dataloader.pt").read_text())  # a torn file fails here, like torch.load
        self.step = int(path.name.split("global_step_")[-1])
        if state["consumed_batches"] != self.step:
            raise SystemExit(f"error: dataloader state {state} does not match step {self.step}")

    def save(self) -> None:
        if self.save_limit > 0:  # EasyR1 prunes before it writes the new checkpoint
            keep = self.save_limit - 1
            old = sorted((int(p.name.split("_")[-1]) for p in self.ckpt.glob("global_step_*")), reverse=True)
            for s in [s for s in old if s < self.step][keep:]:
                shutil.rmtree(self.ckpt / f"global_step_{s}", ignore_errors=True)
        folder = self.ckpt / f"global_step_{self.step}"
        actor = folder / "actor"
        actor.mkdir(parents=True, exist_ok=True)
        for r in range(self.world):
            for kind in ("model", "optim", "extra_state"):
                (actor / f"{kind}_world_size_{self.world}_rank_{r}.pt").write_bytes(f"{kind} {self.step} {r}".encode())
        (actor / "huggingface").mkdir(exist_ok=True)
        (actor / "huggingface" / "config.json").write_text("{}")
        self.maybe_pause_mid_save()
        if self.lora:
            (actor / "lora_adapter").mkdir(exist_ok=True)
            (actor / "lora_adapter" / "adapter_model.safetensors").write_bytes(f"lora {self.step}".encode())
            (actor / "lora_adapter" / "adapter_config.json").write_text(json.dumps({"r": 64, "step": self.step}))
        (folder / "dataloader.pt").write_text(json.dumps({"consumed_batches": self.step}))
        info = {
            "best_global_step": self.step,
            "best_val_reward_score": 0.0,
            "last_global_step": self.step,
            "last_actor_path": str(actor.resolve()),
        }
        with open(self.ckpt / TRACKER, "w") as f:
            json.dump(info, f, indent=2)
        print(f"saved global_step_{self.step}", flush=True)

    def maybe_pause_mid_save(self) -> None:
        spec = os.environ.get("QUOTECITE_STANDIN_SLOW_SAVE", "")
        if not spec:
            return
        at, seconds = spec.split(":")
        marker = self.ckpt / f".standin_slow_save_{at}"
        if int(at) == self.step and not marker.exists():
            marker.touch()
            print(f"pausing {seconds}s in the middle of writing global_step_{self.step}", flush=True)
            time.sleep(float(seconds))

    def wait_for_gate(self, step: int) -> None:
        """Block until the gate file allows ``step`` or SIGUSR1 arrives (no gate: return at once)."""
        if not self.gate:
            return
        announced = False
        while not self.stop:
            try:
                allowed = int(Path(self.gate).read_text().strip() or "0")
            except (OSError, ValueError):  # missing, or caught half-written
                allowed = 0
            if allowed >= step:
                return
            if not announced:
                print(f"waiting at the gate before step {step} (allowed: {allowed})", flush=True)
                announced = True
            time.sleep(0.05)

    # --------------------------------------------------------------- the loop
    def call_servers(self) -> dict:
        from reward.judge import JudgeRequest
        from reward.judge_http import HttpJudge
        from reward.servers import health_url, wait_for_health

        counters = {"judge_calls": 0, "embed_calls": 0}
        budget = float(get(self.cfg, "worker.reward.reward_function_kwargs.judge_outage_s", 600))
        if self.judge_url:
            judge = HttpJudge(
                self.judge_url, self.judge_model, retries=1, backoff_s=0.1, timeout_s=10, outage_s=budget
            )
            (scores,) = judge.score_batch([JudgeRequest(f"question {self.step}", "gold", "answer", ())])
            assert scores is not None, judge.failure_examples
            counters["judge_calls"] += 1
            if judge.stats.outages:
                counters["judge_outages"] = judge.stats.outages
        if self.embed_url:
            started = None
            while True:
                try:
                    r = post(
                        self.embed_url + "/embeddings",
                        {
                            "model": os.environ.get("QUOTECITE_EMBED_MODEL", ""),
                            "input": [f"quote at step {self.step}"],
                        },
                    )
                    break
                except OSError:  # refused, reset, HTTP 5xx: the reward's embedder outage rule
                    started = started or time.monotonic()
                    url = health_url(self.embed_url)
                    wait_for_health(url, started + budget, started, "embedding server", budget, self.embed_url)
            assert len(r["data"]) == 1
            counters["embed_calls"] += 1
        return counters

    def run(self) -> int:
        if msg := os.environ.get("QUOTECITE_STANDIN_FAIL_AT_START"):
            print(f"error: {msg}", file=sys.stderr)
            return 1
        gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        if len(gpus) != self.world:
            print(f"error: n_gpus_per_node={self.world} but CUDA_VISIBLE_DEVICES={gpus}", file=sys.stderr)
            return 1
        self.ray_nodes: list[dict] = []
        if os.environ.get("RAY_ADDRESS", "local") != "local" and not self.check_ray_cluster():
            return 1
        if os.environ.get("RAY_ADDRESS") == "local" and os.environ.get("QUOTECITE_STANDIN_RAY_INIT") == "1":
            self.local_ray()
        signal.signal(signal.SIGUSR1, self.on_usr1)
        self.start_logger()
        self.load()
        self.start_step = self.step
        print(f"Total training steps: {self.max_steps}; starting at {self.step}", flush=True)
        if self.val_before_train:
            self.log({"val": {"reward_score": 0.5, "overall_reward": 0.5}}, self.step)  # EasyR1's _validate keys
        saved = True
        while self.step < self.max_steps:
            self.wait_for_gate(self.step + 1)
            if self.stop:  # SIGUSR1 while held at the gate: the last step is done and saved or logged
                break
            self.step += 1
            time.sleep(self.step_seconds)
            if os.environ.get("QUOTECITE_STANDIN_NO_GROUP_AT") == str(self.step):
                # the reward's own report of an attempt that kept no group, then EasyR1's error and exit
                from collections import Counter

                from reward.pipeline import TrainBatchTracker

                tracker = TrainBatchTracker(2, [0.01, 0.99])  # as the reward's: batches done since this start
                tracker.batches, tracker.calls = self.step - 1 - self.start_step, 1
                tracker._report_no_group_kept(2, Counter(zero_variance=2))
                print("RuntimeError: No sample is kept after filtering. Please check your data.", file=sys.stderr)
                return 1
            try:
                counters = self.remote_counters() if self.ray_nodes else self.call_servers()
            except ServerOutageError as e:  # what a Ray task error from the reward actor does to EasyR1's fit()
                _report_outage(e)
                print(f"ray.exceptions.RayTaskError(ServerOutageError): {e}", file=sys.stderr, flush=True)
                return 1
            if self.metrics_dir:
                self.write_samples()
                with open(Path(self.metrics_dir) / "reward_counters.jsonl", "a") as f:
                    f.write(json.dumps({"step": self.step, **counters}) + "\n")
            saved = self.save_freq > 0 and self.step % self.save_freq == 0
            if saved:
                self.save()
            self.log({**metrics(self.step), "timing_s": {"step": self.step_seconds}}, self.step)
            if self.stop:
                break
        if not saved:
            self.save()
        print(f"exiting at step {self.step}" + (" (SIGUSR1)" if self.stop else ""), flush=True)
        return 0

    def check_ray_cluster(self) -> bool:
        """What EasyR1's ``ray.init()`` does under ``RAY_ADDRESS``: join the job's cluster, which must offer
        ``trainer.n_gpus_per_node`` GPUs on each of ``trainer.nnodes`` nodes (EasyR1 places one worker per GPU there).
        Prints one ``{"standin": "ray", ...}`` line with the live nodes it saw, then disconnects."""
        import ray

        nnodes = int(get(self.cfg, "trainer.nnodes", 1))
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False, logging_level="WARNING",
                 runtime_env={"env_vars": EASYR1_RUNTIME_ENV})  # fmt: skip
        nodes = [
            {"address": n["NodeManagerAddress"], "gpus": n["Resources"].get("GPU", 0), "id": n["NodeID"]}
            for n in ray.nodes()
            if n["Alive"]
        ]
        self.ray_nodes = nodes
        print(json.dumps({"standin": "ray", "address": os.environ["RAY_ADDRESS"], "nodes": nodes}), flush=True)
        gpu_nodes = [n for n in nodes if n["gpus"] >= self.world]
        if len(gpu_nodes) < nnodes:
            print(f"error: trainer.nnodes={nnodes} x n_gpus_per_node={self.world}, but the Ray cluster at "
                  f"{os.environ['RAY_ADDRESS']} has {nodes}", file=sys.stderr)  # fmt: skip
            return False
        return True

    def remote_counters(self) -> dict:
        """One Ray task per trainer node writes this step's reward counters, as EasyR1's reward actors would: what
        it knows of the servers and the run folder comes from its own node's environment (its ``ray start``)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        step = self.step
        cfg = self.cfg

        @ray.remote(num_cpus=0)
        def reward_actor() -> dict:
            env = os.environ
            missing = [
                k for k in ("QUOTECITE_METRICS_DIR", "QUOTECITE_JUDGE_URL", "QUOTECITE_EMBED_URL") if not env.get(k)
            ]
            if missing:
                raise RuntimeError(f"reward worker on {env.get('SLURMD_NODENAME', '?')} does not see {missing}")
            t = Trainer.__new__(Trainer)
            t.cfg, t.step = cfg, step
            t.judge_url, t.judge_model = env["QUOTECITE_JUDGE_URL"].split(",")[0], env.get("QUOTECITE_JUDGE_MODEL", "")
            t.embed_url = env["QUOTECITE_EMBED_URL"]
            counters = t.call_servers()
            node = env.get("SLURMD_NODENAME", "?")
            with open(Path(env["QUOTECITE_METRICS_DIR"]) / "reward_counters.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "nodes": {node: counters}}) + "\n")
            return counters

        refs = [reward_actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["id"], soft=False)).remote()
                for n in self.ray_nodes if n["gpus"] >= self.world]  # fmt: skip
        results = ray.get(refs, timeout=120)
        return {
            "judge_calls": sum(r["judge_calls"] for r in results),
            "embed_calls": sum(r["embed_calls"] for r in results),
        }

    def write_samples(self) -> None:
        """The reward's samples of this step, as the reward plugin writes them (``reward.samples.SampleWriter`` into
        ``$QUOTECITE_METRICS_DIR/samples``; the n-th batch of a segment is its n-th step): one group of two responses
        with a crop each, so a run on the local Slurm leaves a samples page. The n-th batch of a segment is step
        ``resume_step + n``."""
        import io

        from PIL import Image

        from reward.samples import SampleWriter

        rows = []
        for k, overall in enumerate((round(self.step / 100, 4), 0.0)):
            png = io.BytesIO()
            Image.new("RGB", (24, 16), (40 * k, 120, (self.step * 37) % 256)).save(png, "PNG")
            rows.append({"qid": f"q{self.step % 3}", "question": f"question {self.step}", "gold": "gold",
                         "answer": f"answer {k}", "quotes": [f"quote {self.step}.{k}"],
                         "citations": [{"page": 1, "bbox": [0.0, 0.0, 24.0, 16.0], "similarity": 0.9, "quote":
                                        f"quote {self.step}.{k}", "text": "block text", "crop": 0}],
                         "crops": [png.getvalue()], "judge_saw_crops": False, "scores": None, "reply": None,
                         "failed": None, "reward": {"overall": overall}, "keep": 0.5, "unscorable": False})  # fmt: skip
        SampleWriter(self.metrics_dir).write(self.step - self.start_step, rows)

    def local_ray(self) -> None:
        """EasyR1's plain ``ray.init()`` on one trainer node: which cluster does it get?"""
        import ray

        ray.init(log_to_driver=False, logging_level="WARNING", runtime_env={"env_vars": EASYR1_RUNTIME_ENV})
        try:
            session = ray._private.worker.global_worker.node.get_session_dir_path()
            print(json.dumps({"standin": "ray-local", "session_dir": session,
                              "address": ray.get_runtime_context().gcs_address}), flush=True)  # fmt: skip
        finally:
            ray.shutdown()

    def on_usr1(self, *_) -> None:
        print("SIGUSR1: will save after this step and exit", flush=True)
        self.stop = True


def main(argv: list[str] | None = None) -> int:
    cfg = parse_cli(list(sys.argv[1:] if argv is None else argv))
    return Trainer(cfg).run()


if __name__ == "__main__":
    sys.exit(main())
