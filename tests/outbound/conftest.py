"""Fixtures: a loopback receiver, a policy that allowlists it, a resolver tests control."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.outbound.client import OutboundClient
from app.outbound.guard import Allowlist, Guard, OutboundPolicy
from tests.outbound.receiver import Receiver
from tests.tls import make_certificate

# Loopback receivers are reachable only because the operator setting says so.
LOOPBACK = Allowlist.parse(["127.0.0.1/32"])


def loopback_policy(**changes: object) -> OutboundPolicy:
    fields: dict[str, object] = {"allow": LOOPBACK, "timeout_s": 5.0, "retries": 2}
    return OutboundPolicy(**{**fields, **changes})  # type: ignore[arg-type]


class Resolutions:
    """A resolver that answers from a script, one answer list per call, and counts calls
    (the last answer repeats). Only tests use it: the service uses getaddrinfo."""

    def __init__(self, **answers: Sequence[Sequence[str]]) -> None:
        self._answers = {host.replace("_", "."): list(a) for host, a in answers.items()}
        self.calls: list[str] = []

    def add(self, host: str, *answers: Sequence[str]) -> None:
        self._answers[host] = list(answers)

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        answers = self._answers.get(host)
        if not answers:
            raise OSError(f"no such test host: {host}")
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[OutboundClient]:
    async with OutboundClient(Guard(loopback_policy())) as outbound:
        yield outbound


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate for ``receiver.test`` (and nothing else)."""

    cert: Path
    key: Path

    def server(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    return Certificate(*make_certificate(tmp_path_factory.mktemp("tls"), "receiver.test"))
