"""Stand-in for ``vllm serve MODEL --host H --port P ...``: the project's scripted OpenAI server on that port.

It takes vLLM's command line as the launch script builds it and checks the flags the launch uses the way vLLM
0.32.0 (the version launch/setup.py pins) does (the `vllm` tier, tests/vllm/, runs the real one on the same command lines; this stand-in stays for the faults a real vLLM cannot be made to produce: a /health that never answers, a wedged server), read from its ``vllm/engine/arg_utils.py`` and ``vllm/config/``:
``--gpu-memory-utilization`` a float in (0, 1] (``CacheConfig``), ``--max-model-len`` an int, ``--runner`` one of
auto/generate/pooling/draft, ``--convert`` one of auto/none/embed/classify, ``--limit-mm-per-prompt`` a JSON object
of counts or option dicts (``MultiModalConfig.limit_per_prompt``), ``--structured-outputs-config`` a JSON object. Any other flag is an error (exit 2), as in
vLLM, so a misspelt flag in the launch fails the tests instead of the first GPU job. It prints one JSON line
describing how it was started (argv, parsed settings, CUDA_VISIBLE_DEVICES) so tests can check the GPU split of a
real job, then serves ``/health``, ``/v1/models``, chat completions and embeddings until SIGTERM.
``--never-healthy`` makes ``/health`` answer 503 forever (a judge that never loads); ``--wedge-after N`` (a test knob,
no vLLM flag) answers 503 to everything after N chat completions (a wedged server that stays alive). The first
line also carries the process id, so a test can kill the server mid-job.

    python -m tests.standins.vllm_serve serve Qwen/Qwen3.5-9B --port 8000 --gpu-memory-utilization 0.55
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tests.support.openai_server import Reply, ScriptedOpenAIServer


def _fraction(v: str) -> float:
    x = float(v)
    if not 0.0 < x <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {v}")
    return x


def _limit_mm(v: str) -> dict:
    try:
        d = json.loads(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {v!r} (vLLM >= 0.10 takes e.g. '{{\"image\": 8}}')") from None
    ok = isinstance(d, dict) and all(
        isinstance(k, str) and ((isinstance(n, int) and not isinstance(n, bool) and n >= 0) or isinstance(n, dict))
        for k, n in d.items()
    )
    if not ok:
        raise argparse.ArgumentTypeError(f"expected a JSON object of modality -> count, got {v}")
    return d


def _json_object(v: str) -> dict:
    try:
        d = json.loads(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {v!r}") from None
    if not isinstance(d, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {v}")
    return d


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    ap = argparse.ArgumentParser(prog="vllm serve (stand-in)")
    ap.add_argument("model")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--runner", default="auto", choices=["auto", "generate", "pooling", "draft"])
    ap.add_argument("--convert", default="auto", choices=["auto", "none", "embed", "classify"])
    ap.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9)
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--limit-mm-per-prompt", type=_limit_mm, default=None)
    ap.add_argument("--structured-outputs-config", type=_json_object, default=None)
    ap.add_argument("--embed-dim", type=int, default=8)
    ap.add_argument("--never-healthy", action="store_true", help="/health answers 503 forever")
    ap.add_argument("--health-delay", type=float, default=0.0, help="seconds before /health answers 200")
    ap.add_argument("--wedge-after", type=int, default=None,
                    help="after this many chat completions, answer every request (/health too) with 503: a wedged "
                    "server whose process stays alive (test knob, not a vLLM flag)")  # fmt: skip
    args = ap.parse_args(argv)
    name = args.served_model_name or args.model
    print(
        json.dumps(
            {
                "standin": "vllm serve",
                "model": args.model,
                "served_model_name": name,
                "runner": args.runner,
                "convert": args.convert,
                "gpu_memory_utilization": args.gpu_memory_utilization,
                "max_model_len": args.max_model_len,
                "limit_mm_per_prompt": args.limit_mm_per_prompt,
                "port": args.port,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "pid": os.getpid(),
                "argv": argv,
            }
        ),
        flush=True,
    )
    wedged = []

    def wedge(path: str, body: dict, n: int) -> Reply | None:
        if path == "/v1/chat/completions" and n >= args.wedge_after:
            wedged.append(True)
        return Reply(status=503, text="wedged") if wedged else None

    srv = ScriptedOpenAIServer(
        handler=wedge if args.wedge_after is not None else None,
        model=name,
        embed_dim=args.embed_dim,
        host=args.host,
        port=args.port,
        health_delay=args.health_delay,
        never_healthy=args.never_healthy,
    )
    srv.serve_until_signal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
