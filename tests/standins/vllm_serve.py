"""Stand-in for ``vllm serve MODEL --host H --port P ...``: the project's scripted OpenAI server on that port.

It takes vLLM's command line as the launch script builds it (unknown flags such as ``--gpu-memory-utilization``
are accepted and recorded), prints one JSON line describing how it was started (argv, CUDA_VISIBLE_DEVICES) so
tests can check the GPU split of a real job, then serves ``/health``, ``/v1/models``, chat completions and
embeddings until SIGTERM. ``--never-healthy`` makes ``/health`` answer 503 forever (a judge that never loads).

    python -m tests.standins.vllm_serve serve Qwen/Qwen3.5-9B --port 8000 --gpu-memory-utilization 0.55
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from tests.support.openai_server import ScriptedOpenAIServer


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        argv = argv[1:]
    ap = argparse.ArgumentParser(prog="vllm serve (stand-in)")
    ap.add_argument("model")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--runner", default="generate")
    ap.add_argument("--embed-dim", type=int, default=8)
    ap.add_argument("--never-healthy", action="store_true", help="/health answers 503 forever")
    ap.add_argument("--health-delay", type=float, default=0.0, help="seconds before /health answers 200")
    args, unknown = ap.parse_known_args(argv)
    name = args.served_model_name or args.model
    print(
        json.dumps(
            {
                "standin": "vllm serve",
                "model": args.model,
                "served_model_name": name,
                "runner": args.runner,
                "port": args.port,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "argv": argv,
                "other_flags": unknown,
            }
        ),
        flush=True,
    )
    srv = ScriptedOpenAIServer(
        model=name,
        embed_dim=args.embed_dim,
        host=args.host,
        port=args.port,
        health_delay=args.health_delay,
        never_healthy=args.never_healthy,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    srv.start()
    done.wait()
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
