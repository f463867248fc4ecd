"""A real, scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests and Slurm stand-ins.

Kept only for what a real vLLM cannot be made to produce: timeouts, HTTP 500/429, trickled or oversized bytes,
replies of a scripted shape, a ``/health`` that never answers. Every request the project sends is also answered by
real vLLM (the CPU build) in the ``vllm`` tier, ``tests/vllm/``.

It speaks the parts of the API that the project uses (chat completions for the judge, embeddings for the
embedder, ``/health`` and ``/v1/models`` as vLLM serves them). Each test scripts its behaviour with a handler:

    with ScriptedOpenAIServer(handler=lambda path, body, n: Reply(status=500) if n == 0 else None) as srv:
        ...  # srv.url == "http://127.0.0.1:PORT/v1"; srv.requests holds (path, body) pairs

Run as a program (``python -m tests.support.openai_server --port P``) it serves the defaults until SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import signal
import socket
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

DEFAULT_JUDGE_CONTENT = '{"answer": 4, "relevance": 4, "coverage": 4}'


@dataclass
class Reply:
    """A scripted answer: ``json`` (or raw ``text``) with ``status`` after ``delay`` seconds; ``hang`` never answers."""

    status: int = 200
    json: dict | None = None
    text: str | None = None
    delay: float = 0.0
    hang: bool = False


Handler = Callable[[str, dict, int], "Reply | dict | None"]


@contextlib.contextmanager
def held_port():
    """A loopback port bound for the block and never listened on: every connection to it is refused, and no other
    process can take it meanwhile (a port chosen, then released, can be taken by anything before the test uses it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def chat_completion(content: str, model: str = "judge-model") -> dict:
    """An OpenAI ``chat.completion`` response body carrying ``content``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def hash_embedding(content: str, dim: int) -> list[float]:
    """A deterministic unit vector from the text of a request item."""
    seed = int.from_bytes(hashlib.sha256(content.encode("utf-8")).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dim)
    return (v / np.linalg.norm(v)).astype(float).tolist()


def embeddings_response(vectors: list[list[float]], model: str = "embed-model") -> dict:
    return {
        "object": "list",
        "model": model,
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }


class ScriptedOpenAIServer:
    """Threaded HTTP server; use as a context manager. ``handler(path, body, n)`` scripts each request, where
    ``n`` counts earlier requests on the same path; returning None falls back to the default behaviour."""

    def __init__(
        self,
        handler: Handler | None = None,
        model: str = "judge-model",
        embed_dim: int = 8,
        host: str = "127.0.0.1",
        port: int = 0,
        health_delay: float = 0.0,
        never_healthy: bool = False,
        refuse_until_start: bool = False,
    ) -> None:
        """``refuse_until_start``: the port is bound at once (nothing else can take it) but listens only from
        :meth:`start` on, so connections before it are refused, as to a server not yet started."""
        self.handler = handler
        self.model = model
        self.embed_dim = embed_dim
        self.health_delay = health_delay
        self.never_healthy = never_healthy
        self.requests: list[tuple[str, dict]] = []
        self._counts: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._httpd = ThreadingHTTPServer((host, port), self._make_handler_class(), bind_and_activate=False)
        self._httpd.daemon_threads = True
        self._listening = False
        try:
            self._httpd.server_bind()
            if not refuse_until_start:
                self._listen()
        except BaseException:
            self._httpd.server_close()
            raise
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def _listen(self) -> None:
        if not self._listening:
            self._httpd.server_activate()
            self._listening = True

    def start(self) -> ScriptedOpenAIServer:
        self._listen()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve_until_signal(self, banner: str | None = None) -> None:
        """Serve until SIGTERM or SIGINT (the program form, for Slurm stand-ins); prints ``banner`` once up."""
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        signal.signal(signal.SIGINT, lambda *_: done.set())
        self.start()
        if banner:
            print(banner.format(url=self.url), flush=True)
        while not done.wait(0.2):  # a timed wait: a signal taken by another thread still runs its handler here
            pass
        self.stop()

    def count(self, path: str) -> int:
        with self._lock:
            return self._counts[path]

    # ------------------------------------------------------------------ defaults
    def default_reply(self, path: str, body: dict) -> Reply:
        if path == "/health":
            healthy = not self.never_healthy and time.monotonic() - self._started >= self.health_delay
            return Reply(status=200 if healthy else 503, text="ok" if healthy else "loading")
        if path == "/v1/models":
            return Reply(json={"object": "list", "data": [{"id": self.model, "object": "model"}]})
        if path == "/v1/chat/completions":
            return Reply(json=chat_completion(DEFAULT_JUDGE_CONTENT, body.get("model", self.model)))
        if path == "/v1/embeddings":
            if "messages" in body:
                msgs = body["messages"]
                batched = bool(msgs) and all(isinstance(m, list) for m in msgs)  # vLLM's batched chat embeddings
                items = [json.dumps(m, sort_keys=True) for m in (msgs if batched else [msgs])]
            else:
                inp = body.get("input", [])
                items = (
                    [inp] if isinstance(inp, str) else [json.dumps(x) if not isinstance(x, str) else x for x in inp]
                )
            vecs = [hash_embedding(x, self.embed_dim) for x in items]
            return Reply(json=embeddings_response(vecs, body.get("model", self.model)))
        return Reply(status=404, json={"error": {"message": f"no route {path}", "type": "not_found"}})

    def _make_handler_class(self):
        server = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _serve(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                body: dict = {}
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    raw = self.rfile.read(length)
                    try:
                        body = json.loads(raw)
                    except json.JSONDecodeError:
                        self._send(Reply(status=400, json={"error": {"message": "body is not JSON"}}))
                        return
                with server._lock:
                    n = server._counts[path]
                    server._counts[path] += 1
                    server.requests.append((path, body))
                reply = server.handler(path, body, n) if server.handler else None
                if reply is None:
                    reply = server.default_reply(path, body)
                elif isinstance(reply, dict):
                    reply = Reply(json=reply)
                if reply.hang:
                    server._stop.wait()
                    return
                if reply.delay:
                    server._stop.wait(reply.delay)
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                if reply.json is not None:
                    data, ctype = json.dumps(reply.json).encode(), "application/json"
                else:
                    data, ctype = (reply.text or "").encode(), "text/plain"
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        return _H


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="judge-model")
    ap.add_argument("--embed-dim", type=int, default=8)
    ap.add_argument("--health-delay", type=float, default=0.0, help="seconds before /health answers 200")
    ap.add_argument("--never-healthy", action="store_true", help="/health always answers 503")
    args = ap.parse_args(argv)
    srv = ScriptedOpenAIServer(
        model=args.model,
        embed_dim=args.embed_dim,
        host=args.host,
        port=args.port,
        health_delay=args.health_delay,
        never_healthy=args.never_healthy,
    )
    srv.serve_until_signal(f"serving {args.model} on {{url}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
