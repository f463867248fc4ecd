"""The scripted test server behaves like an OpenAI-compatible endpoint (other tests rely on it)."""

import httpx

from tests.support.openai_server import Reply, ScriptedOpenAIServer


def test_default_routes_answer_like_vllm():
    with ScriptedOpenAIServer(model="m", embed_dim=4) as srv:
        assert httpx.get(srv.base + "/health").status_code == 200
        assert httpx.get(srv.url + "/models").json()["data"][0]["id"] == "m"
        chat = httpx.post(srv.url + "/chat/completions", json={"model": "m", "messages": []}).json()
        assert chat["choices"][0]["message"]["content"] == '{"answer": 4, "relevance": 4, "coverage": 4}'
        emb = httpx.post(srv.url + "/embeddings", json={"model": "m", "input": ["a", "b"]}).json()
        assert [len(d["embedding"]) for d in emb["data"]] == [4, 4]
        again = httpx.post(srv.url + "/embeddings", json={"model": "m", "input": "a"}).json()
        assert again["data"][0]["embedding"] == emb["data"][0]["embedding"]  # deterministic per content
        assert [p for p, _ in srv.requests] == ["/health", "/v1/models", "/v1/chat/completions"] + [
            "/v1/embeddings"
        ] * 2


def test_handler_scripts_status_by_request_index():
    def handler(path, body, n):
        return Reply(status=500, json={"error": "boom"}) if n == 0 else None

    with ScriptedOpenAIServer(handler=handler) as srv:
        assert httpx.post(srv.url + "/chat/completions", json={}).status_code == 500
        assert httpx.post(srv.url + "/chat/completions", json={}).status_code == 200
        assert srv.count("/v1/chat/completions") == 2


def test_never_healthy_answers_503():
    with ScriptedOpenAIServer(never_healthy=True) as srv:
        assert httpx.get(srv.base + "/health").status_code == 503
