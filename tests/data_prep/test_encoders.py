"""Encoders: the registry, ``minilm`` (the real model shipped on PyPI), and ``qwen3-vl-embedding`` over HTTP against a
real scripted OpenAI-compatible server on 127.0.0.1 (the in-process transport is in test_qwen3vl_encoder.py)."""

from __future__ import annotations

import base64
import io
import threading
import time

import numpy as np
import pytest
from PIL import Image
from reportlab.pdfgen import canvas

from core.errors import InputError
from data_prep.document import Document
from data_prep.encoders import encoder_names, get_encoder, l2_normalize, torch_placement
from data_prep.encoders.minilm import block_text
from data_prep.encoders.qwen3vl import DEFAULT_DOCUMENT_INSTRUCTION, DEFAULT_QUERY_INSTRUCTION, EmbeddingServerError
from data_prep.types import Block
from tests.support.openai_server import Reply, ScriptedOpenAIServer, embeddings_response


@pytest.fixture(scope="module")
def pdf(tmp_path_factory):
    path = tmp_path_factory.mktemp("encpdf") / "page.pdf"
    c = canvas.Canvas(str(path), pagesize=(300, 200), invariant=1)
    c.setFont("Helvetica", 12)
    c.drawString(20, 170, "Revenue grew by 12% in 2023.")
    c.rect(150, 20, 100, 80, fill=1)
    c.showPage()
    c.save()
    return path


BLOCKS = [
    Block(0, 1, (18, 16, 190, 34), "text", "Revenue grew by 12% in 2023."),
    Block(1, 1, (150, 100, 250, 180), "figure", ""),
]


# ---------------------------------------------------------------------------------------------- registry
def test_registry_lists_both_encoders_and_suggests_close_names():
    assert {"minilm", "qwen3-vl-embedding"} <= set(encoder_names())
    with pytest.raises(KeyError, match="unknown encoder 'minlm'; did you mean 'minilm'"):
        get_encoder("minlm")


def test_l2_normalize_leaves_zero_rows_finite():
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


# ---------------------------------------------------------------------------------------------- minilm
@pytest.fixture(scope="module")
def minilm():
    return get_encoder("minilm")


def test_minilm_gives_384_dim_unit_rows_and_ranks_paraphrases_first(minilm):
    emb = minilm.embed_texts(
        ["Revenue grew by 12% in 2023.", "In 2023 sales revenue increased twelve percent.", "The cat sat on a mat."]
    )
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.3
    assert minilm.embed_texts([]).shape == (0, 384)


def test_minilm_blocks_use_their_text_or_type_name(minilm, pdf):
    assert [block_text(b) for b in BLOCKS] == ["Revenue grew by 12% in 2023.", "figure"]
    with Document.open(pdf) as doc:
        emb = minilm.embed_blocks(doc, BLOCKS)
    np.testing.assert_allclose(emb, minilm.embed_texts(["Revenue grew by 12% in 2023.", "figure"]), atol=1e-5)
    assert minilm.fingerprint() == get_encoder("minilm", batch_size=8).fingerprint()


# ---------------------------------------------------------------------------------------------- qwen3-vl over HTTP
def _http(srv: ScriptedOpenAIServer, **kw):
    kw = {"model": "embed-model", "retry_backoff_s": 0.01, **kw}
    return get_encoder("qwen3-vl-embedding", transport="http", url=srv.url, **kw)


def _decode_png(data_uri: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert data_uri.startswith(prefix)
    return Image.open(io.BytesIO(base64.b64decode(data_uri[len(prefix) :])))


def test_http_block_request_carries_the_png_crop_and_the_system_instruction(pdf):
    with ScriptedOpenAIServer(embed_dim=8) as srv:
        enc = _http(srv)
        with Document.open(pdf) as doc:
            emb = enc.embed_blocks(doc, BLOCKS)
        assert emb.shape == (2, 8) and enc.dim == 8  # the width came from the answers: no probe request
        reqs = [body for path, body in srv.requests if path == "/v1/embeddings"]
    assert len(reqs) == 2
    for body in reqs:
        assert body["model"] == "embed-model"
        assert body["encoding_format"] == "float" and body["add_generation_prompt"] is True
        system, user = body["messages"]
        assert system == {"role": "system", "content": DEFAULT_DOCUMENT_INSTRUCTION}
        assert user["role"] == "user" and [c["type"] for c in user["content"]] == ["image_url"]
    # The two crops are sent concurrently: tell them apart by what they show, not by arrival order.
    imgs = [_decode_png(body["messages"][1]["content"][0]["image_url"]["url"]) for body in reqs]
    dark = [(np.asarray(im.convert("L")) < 64).mean() for im in imgs]
    text, fig = (imgs[0], imgs[1]) if dark[0] < dark[1] else (imgs[1], imgs[0])
    # Block 0 is 172 x 18 points; at 150 dpi that is 358 x 37 pixels (pdfium rounds the crop window).
    assert abs(text.size[0] - 172 * 150 / 72) <= 2 and abs(text.size[1] - 18 * 150 / 72) <= 2
    # The figure crop (block 1) is the black rectangle: mostly dark pixels.
    assert (np.asarray(fig.convert("L")) < 64).mean() > 0.9


def test_http_query_request_is_text_under_the_query_instruction():
    with ScriptedOpenAIServer(embed_dim=8) as srv:
        _http(srv).embed_texts(["revenue grew"])
        (_, body) = srv.requests[-1]
    assert body["messages"] == [
        {"role": "system", "content": DEFAULT_QUERY_INSTRUCTION},
        {"role": "user", "content": [{"type": "text", "text": "revenue grew"}]},
    ]


def _indexed_vectors(path, body, n):
    """Answer item "q<k>" with (k+1) * e_k: unnormalised, and tells which item it answers."""
    text = body["messages"][1]["content"][0]["text"]
    k = int(text[1:])
    vec = [0.0] * 16
    vec[k] = float(k + 1)
    time.sleep(0.002 * (16 - k))  # later items answer sooner, so completion order differs from input order
    return embeddings_response([vec], body["model"])


def test_http_vectors_are_renormalised_and_kept_in_input_order():
    with ScriptedOpenAIServer(handler=_indexed_vectors) as srv:
        emb = _http(srv, max_concurrency=8, texts_per_request=1).embed_texts([f"q{k}" for k in range(16)])
    np.testing.assert_allclose(emb, np.eye(16, dtype=np.float32), atol=1e-7)


@pytest.mark.parametrize("limit", [1, 4])
def test_http_requests_in_flight_never_exceed_the_concurrency_limit(limit):
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow(path, body, n):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.1)
        with lock:
            state["now"] -= 1
        return None

    with ScriptedOpenAIServer(handler=slow, embed_dim=4) as srv:
        _http(srv, max_concurrency=limit, texts_per_request=1).embed_texts([f"text {i}" for i in range(8)])
    assert state["max"] == limit


def test_http_retries_500_and_timeouts_then_succeeds():
    def flaky(path, body, n):
        if n == 0:
            return Reply(status=500, json={"error": {"message": "CUDA out of memory"}})
        if n == 1:
            return Reply(hang=True)
        return None

    with ScriptedOpenAIServer(handler=flaky, embed_dim=4) as srv:
        emb = _http(srv, max_concurrency=1, timeout_s=0.5).embed_texts(["a"])
        assert srv.count("/v1/embeddings") == 3
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)


def test_http_gives_a_clear_error_after_the_retries():
    with ScriptedOpenAIServer(handler=lambda p, b, n: Reply(status=503, text="overloaded")) as srv:
        with pytest.raises(EmbeddingServerError) as err:
            _http(srv, max_retries=2).embed_texts(["a"])
        assert srv.count("/v1/embeddings") == 3
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(srv.url + "/embeddings: item 0 failed after 3 attempts")
    assert "HTTP 503: overloaded" in msg


def test_http_client_errors_are_not_retried():
    with ScriptedOpenAIServer(
        handler=lambda p, b, n: Reply(status=400, json={"error": {"message": "bad image"}})
    ) as srv:
        with pytest.raises(EmbeddingServerError, match="rejected with HTTP 400.*bad image"):
            _http(srv).embed_texts(["a"])
        assert srv.count("/v1/embeddings") == 1


def test_http_unreachable_server_is_reported_with_its_url():
    with ScriptedOpenAIServer() as srv:
        url = srv.url
    enc = get_encoder("qwen3-vl-embedding", transport="http", url=url, max_retries=1, retry_backoff_s=0.01)
    with pytest.raises(EmbeddingServerError, match=r"failed after 2 attempts; last: connection failed"):
        enc.embed_texts(["a"])


def test_http_dim_comes_from_one_probe_answer_and_narrow_answers_are_rejected():
    with ScriptedOpenAIServer(embed_dim=8) as srv:
        assert _http(srv).dim == 8
        assert srv.count("/v1/embeddings") == 1
        assert srv.requests[0][1]["messages"][1]["content"][0]["text"] == "dimension probe"
        with pytest.raises(EmbeddingServerError, match="need at least 16 columns"):
            _http(srv, dim=16).embed_texts(["a"])
        cut = _http(srv, dim=4).embed_texts(["a"])
        full = _http(srv).embed_texts(["a"])
    np.testing.assert_allclose(cut[0], full[0, :4] / np.linalg.norm(full[0, :4]), atol=1e-6)


def test_http_other_items_stop_retrying_once_one_item_has_failed():
    def handler(path, body, n):
        text = body["messages"][1]["content"][0]["text"]
        return Reply(status=400, text="bad item") if text == "q0" else Reply(status=503, text="busy")

    with ScriptedOpenAIServer(handler=handler) as srv:
        with pytest.raises(EmbeddingServerError, match="item 0 rejected with HTTP 400"):
            _http(srv, max_concurrency=4, max_retries=3, retry_backoff_s=0.3, texts_per_request=1).embed_texts(
                [f"q{k}" for k in range(4)]
            )
        # Without the abort, q1..q3 would make 4 attempts each (13 requests in all); with it, at most 2 each.
        assert srv.count("/v1/embeddings") <= 7


def _texts_of(body) -> list[str]:
    """The texts an embedding request carries, one per conversation (batched or not)."""
    msgs = body["messages"]
    convs = msgs if isinstance(msgs[0], list) else [msgs]
    return [conv[1]["content"][0]["text"] for conv in convs]


@pytest.mark.parametrize("per_request", [2, 8, 100])
def test_http_batched_texts_give_the_vectors_of_one_request_each(per_request):
    """Several texts in one request (vLLM's batched chat embeddings): every conversation is the one a lone request
    carries, and the vectors are those of one request per text, in input order."""
    texts = [f"quote number {k}" for k in range(19)]
    with ScriptedOpenAIServer(embed_dim=8) as srv:
        one_by_one = _http(srv, texts_per_request=1).embed_texts(texts)
        lone = [body for path, body in srv.requests if path == "/v1/embeddings"]
        before = len(srv.requests)
        batched = _http(srv, texts_per_request=per_request).embed_texts(texts)
        bodies = [body for path, body in srv.requests[before:] if path == "/v1/embeddings"]
    assert np.array_equal(batched, one_by_one)
    assert len(bodies) == -(-len(texts) // per_request) and len(lone) == len(texts)
    assert sorted(t for b in bodies for t in _texts_of(b)) == sorted(texts)
    convs = {_texts_of(b)[0]: b["messages"] for b in lone}
    for body in bodies:
        assert {k: v for k, v in body.items() if k != "messages"} == {
            k: v for k, v in lone[0].items() if k != "messages"
        }
        if len(_texts_of(body)) > 1:
            assert body["messages"] == [convs[t] for t in _texts_of(body)]


def test_http_batched_answers_are_placed_by_their_index():
    """A server may answer a batch's items in any order: each vector goes to the item its ``index`` names."""

    def reversed_answer(path, body, n):
        texts = _texts_of(body)
        data = [{"object": "embedding", "index": i, "embedding": [0.0] * int(t[1:]) + [1.0] + [0.0] * (15 - int(t[1:]))}
                for i, t in enumerate(texts)]  # fmt: skip
        return Reply(json={"object": "list", "model": body["model"], "data": data[::-1]})

    with ScriptedOpenAIServer(handler=reversed_answer) as srv:
        emb = _http(srv, texts_per_request=5).embed_texts([f"q{k}" for k in range(16)])
        assert srv.count("/v1/embeddings") == 4
    assert np.array_equal(emb, np.eye(16, dtype=np.float32))


def test_http_items_with_a_crop_go_alone_between_batched_texts(pdf):
    """Blocks embedded as crop and text: each request carries one crop; text-only blocks go together."""
    with ScriptedOpenAIServer(embed_dim=8) as srv, Document.open(pdf) as doc:
        text_blocks = [Block(i, b.page, b.bbox, "text", f"block text {i}") for i, b in enumerate(BLOCKS * 3)]
        both = _http(srv, block_content="text", texts_per_request=4).embed_blocks(doc, text_blocks)
        assert srv.count("/v1/embeddings") == 2
        alone = _http(srv, block_content="text", texts_per_request=1).embed_blocks(doc, text_blocks)
        before = len(srv.requests)
        _http(srv, block_content="image", texts_per_request=4).embed_blocks(doc, BLOCKS)
        image_bodies = [b for path, b in srv.requests[before:] if path == "/v1/embeddings"]
    assert np.array_equal(both, alone)
    assert len(image_bodies) == len(BLOCKS) and all(b["messages"][0]["role"] == "system" for b in image_bodies)


def test_http_a_batched_answer_short_of_items_is_a_clear_error():
    def short(path, body, n):
        return embeddings_response([[1.0, 0.0]], body["model"])  # one vector for several texts

    with ScriptedOpenAIServer(handler=short) as srv:
        with pytest.raises(EmbeddingServerError, match=r"items 0\.\.2: answer has no embedding for every index"):
            _http(srv, texts_per_request=3).embed_texts(["a", "b", "c"])
    with pytest.raises(InputError, match="texts_per_request must be >= 1"):
        get_encoder("qwen3-vl-embedding", transport="http", url="http://127.0.0.1:9", texts_per_request=0)


def test_torch_placement_is_one_rule_for_every_transformers_model():
    """The qwen3-vl-embedding and colqwen2 encoders and the attention interface place their models by this rule."""
    torch = pytest.importorskip("torch")

    assert torch_placement("cpu", "auto", "x") == (torch.device("cpu"), torch.float32)
    assert torch_placement("cpu", "bfloat16", "x") == (torch.device("cpu"), torch.bfloat16)
    for bad in ("float99", "Tensor"):  # not an attribute of torch / an attribute that is no dtype
        with pytest.raises(InputError, match=f"colqwen2: dtype '{bad}' is not a torch dtype"):
            torch_placement("cpu", bad, "colqwen2")
