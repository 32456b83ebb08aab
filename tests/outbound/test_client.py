"""The guarded client against real receivers on loopback (allowlisted by the policy)."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator

import pytest

from app.outbound.client import OutboundClient
from app.outbound.errors import OutboundFailed, OutboundRefused
from app.outbound.guard import Allowlist, Guard, OutboundPolicy
from tests.outbound.conftest import Certificate, Resolutions, loopback_policy
from tests.outbound.receiver import Receiver, Reply, Seen
from tests.waiting import until

BODY = b'{"hello":"world"}'


class Waits:
    """A sleep that records what it was asked to wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
async def quick() -> AsyncIterator[tuple[OutboundClient, Waits]]:
    waits = Waits()
    async with OutboundClient(Guard(loopback_policy()), sleep=waits) as outbound:
        yield outbound, waits


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_post_reaches_the_allowlisted_receiver_as_sent(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(200, b'{"price": 3}', {"content-type": "application/json"}))
    response = await client.post_json(f"{receiver.url}/lookup?x=1", BODY, {"X-Trace": "t-1"})
    assert (response.status, response.body, response.attempts) == (200, b'{"price": 3}', 1)
    assert response.content_type == "application/json"
    (seen,) = receiver.seen
    assert seen.path == "/lookup?x=1"
    assert seen.body == BODY
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert seen.headers["x-trace"] == "t-1"
    assert seen.headers["accept-encoding"] == "identity"


async def test_the_caller_cannot_override_host_or_framing_headers(
    client: OutboundClient, receiver: Receiver
) -> None:
    headers = {"Host": "internal.example", "Content-Length": "1", "Content-Type": "text/plain"}
    await client.post_json(receiver.url, BODY, headers)
    (seen,) = receiver.seen
    assert seen.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert seen.headers["content-length"] == str(len(BODY))
    assert seen.headers["content-type"] == "application/json"


async def test_loopback_is_refused_unless_allowlisted_and_nothing_is_sent(
    receiver: Receiver,
) -> None:
    async with OutboundClient(Guard(OutboundPolicy())) as strict:
        with pytest.raises(OutboundRefused, match="loopback"):
            await strict.post_json(receiver.url, BODY)
        with pytest.raises(OutboundRefused, match="loopback"):
            await strict.post_json(f"https://127.0.0.1:{receiver.port}/", BODY)
        with pytest.raises(OutboundRefused, match="loopback"):
            await strict.post_json(f"https://[::ffff:127.0.0.1]:{receiver.port}/", BODY)
    assert receiver.seen == []


@pytest.mark.parametrize(
    "url",
    ["https://10.0.0.1/", "https://169.254.169.254/latest/meta-data/", "https://[::1]/"],
)
async def test_private_link_local_and_loopback_urls_are_refused_at_once(url: str) -> None:
    async with OutboundClient(Guard(OutboundPolicy())) as strict:
        with pytest.raises(OutboundRefused):  # refused, not a connect that timed out
            await strict.post_json(url, BODY)


async def test_a_redirect_is_an_error_and_is_never_followed(
    client: OutboundClient, receiver: Receiver
) -> None:
    # The place it points to is a receiver on 127.0.0.2: not allowlisted, and it must
    # see no request at all.
    with Receiver(host="127.0.0.2") as inside:
        receiver.script(Reply(302, b"", {"location": f"{inside.url}/admin"}))
        with pytest.raises(OutboundFailed) as info:
            await client.post_json(receiver.url, BODY)
        assert info.value.reason == "redirect"
        assert info.value.http_status == 302
        assert not info.value.retryable
        assert "127.0.0.2" in info.value.detail  # the operator sees where it pointed
        assert inside.seen == []
    assert len(receiver.seen) == 1


async def test_a_redirect_to_a_metadata_address_is_not_followed(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(307, b"", {"location": "http://169.254.169.254/latest/meta-data/"}))
    with pytest.raises(OutboundFailed, match="redirects are not followed"):
        await client.post_json(receiver.url, BODY)
    assert len(receiver.seen) == 1


async def test_an_answer_over_the_byte_cap_is_dropped(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(200, b"x" * 5000))
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(receiver.url, BODY, max_bytes=4096)
    assert (info.value.reason, info.value.retryable) == ("too_large", False)
    assert "declared 5000 bytes" in info.value.detail
    assert len(receiver.seen) == 1


async def test_a_streamed_answer_is_cut_at_the_cap_without_reading_it_all(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(200, b"[", stream_bytes=64 << 20))  # 64 MiB, no Content-Length
    with pytest.raises(OutboundFailed, match="still sending") as info:
        await client.post_json(receiver.url, BODY, max_bytes=100_000)
    assert info.value.reason == "too_large"
    # The receiver stopped when the client hung up: the cap and socket buffers, not 64 MiB.
    (sent,) = await until(lambda: receiver.streamed, what="the receiver to see the hang-up")
    assert sent < 16 << 20


async def test_the_policy_caps_what_a_caller_may_ask_for(receiver: Receiver) -> None:
    policy = loopback_policy(max_response_bytes=2048, max_request_bytes=1024)
    async with OutboundClient(Guard(policy)) as capped:
        receiver.script(Reply(200, b"y" * 4096))
        with pytest.raises(OutboundFailed, match="over 2048 bytes"):
            await capped.post_json(receiver.url, BODY, max_bytes=1 << 20)
        with pytest.raises(OutboundFailed, match="over the cap of 1024") as info:
            await capped.post_json(receiver.url, b"z" * 2000)
    assert info.value.reason == "too_large"
    assert len(receiver.seen) == 1  # the large body was never sent


async def test_a_slow_receiver_times_out_within_the_calls_time(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(200, b"{}", delay_s=3.0))
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(receiver.url, BODY, timeout_s=0.4)
    assert (info.value.reason, info.value.retryable) == ("timeout", True)
    assert info.value.attempts == 1  # no time was left for another


async def test_5xx_is_retried_with_backoff_then_succeeds(
    quick: tuple[OutboundClient, Waits], receiver: Receiver
) -> None:
    client, sleep = quick
    receiver.script(Reply(503), Reply(502), Reply(200, b'{"ok": true}'))
    response = await client.post_json(receiver.url, BODY)
    assert (response.attempts, response.body) == (3, b'{"ok": true}')
    assert len(receiver.seen) == 3
    first, second = sleep.waits
    # Equal jitter, doubling.
    assert 0.125 <= first <= 0.25
    assert 0.25 <= second <= 0.5


async def test_retries_stop_at_the_configured_count(
    quick: tuple[OutboundClient, Waits], receiver: Receiver
) -> None:
    client, _ = quick
    receiver.script(Reply(500, b"boom"))
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(receiver.url, BODY, retries=1)
    assert (info.value.reason, info.value.http_status, info.value.attempts) == (
        "unavailable",
        500,
        2,
    )
    assert info.value.retryable
    assert len(receiver.seen) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_4xx_is_final_and_not_retried(
    quick: tuple[OutboundClient, Waits], receiver: Receiver, status: int
) -> None:
    client, sleep = quick
    receiver.script(Reply(status, b'{"error": "bad arguments"}'))
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(receiver.url, BODY)
    assert (info.value.reason, info.value.http_status, info.value.retryable) == (
        "http_error",
        status,
        False,
    )
    assert info.value.excerpt == '{"error": "bad arguments"}'
    assert len(receiver.seen) == 1
    assert sleep.waits == []


async def test_retry_after_is_honoured_when_it_fits_in_the_time_left(
    quick: tuple[OutboundClient, Waits], receiver: Receiver
) -> None:
    client, sleep = quick
    receiver.script(Reply(429, headers={"retry-after": "1"}), Reply(200, b"{}"))
    response = await client.post_json(receiver.url, BODY, timeout_s=4.0)
    assert response.attempts == 2
    assert sleep.waits == [1.0]  # the wait it asked for: the server's, not its own backoff


async def test_a_retry_after_past_the_time_left_gives_up_at_once(
    quick: tuple[OutboundClient, Waits], receiver: Receiver
) -> None:
    client, sleep = quick
    receiver.script(Reply(503, headers={"retry-after": "30"}), Reply(200, b"{}"))
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(receiver.url, BODY, timeout_s=2.0)
    assert sleep.waits == []  # it did not wait for a retry it would have no time for
    assert (info.value.retryable, info.value.retry_after_s) == (True, 30.0)
    assert len(receiver.seen) == 1


async def test_a_refused_connection_is_retried_then_fails(
    quick: tuple[OutboundClient, Waits],
) -> None:
    client, sleep = quick
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(f"http://127.0.0.1:{_free_port()}/", BODY)
    assert (info.value.reason, info.value.attempts) == ("unavailable", 3)
    assert "could not connect" in info.value.detail
    assert len(sleep.waits) == 2


async def test_each_retry_takes_the_next_checked_address(receiver: Receiver) -> None:
    # The name resolves to a dead loopback address first, then to the receiver's.
    resolver = Resolutions(multi_test=[["127.0.0.3", "127.0.0.1"]])
    allow = Allowlist.parse(["multi.test"])
    guard = Guard(loopback_policy(allow=allow), resolver=resolver)
    async with OutboundClient(guard, sleep=Waits()) as client:
        response = await client.post_json(f"http://multi.test:{receiver.port}/", BODY)
    assert response.attempts == 2
    assert resolver.calls == ["multi.test"]
    assert receiver.seen[0].headers["host"] == f"multi.test:{receiver.port}"


async def test_the_name_is_resolved_once_and_the_checked_address_is_used(
    certificate: Certificate,
) -> None:
    """DNS rebinding: the first answer is a (allowlisted) loopback address, every later
    one a private address. The call connects to the first, retries included; TLS is
    checked against the name, on the connection to the address."""
    resolver = Resolutions(receiver_test=[["127.0.0.1"], ["10.0.0.1"]])
    guard = Guard(loopback_policy(), resolver=resolver)
    with Receiver(tls=certificate.server()) as server:
        server.script(Reply(503), Reply(200, b'{"ok": 1}'))
        async with OutboundClient(guard, verify=certificate.client(), sleep=Waits()) as client:
            url = f"https://receiver.test:{server.port}/hook"
            response = await client.post_json(url, BODY)
            assert (response.attempts, response.body) == (2, b'{"ok": 1}')
            assert resolver.calls == ["receiver.test"]  # one resolution for both attempts
            assert [s.headers["host"] for s in server.seen] == [f"receiver.test:{server.port}"] * 2

            # The next call resolves again, gets the private address, and is refused.
            with pytest.raises(OutboundRefused, match=r"receiver\.test resolves to a private"):
                await client.post_json(url, BODY)
        assert len(server.seen) == 2


async def test_a_certificate_for_another_name_fails_and_is_not_retried(
    certificate: Certificate,
) -> None:
    resolver = Resolutions(other_test=[["127.0.0.1"]])
    guard = Guard(loopback_policy(), resolver=resolver)
    with Receiver(tls=certificate.server()) as server:
        async with OutboundClient(guard, verify=certificate.client(), sleep=Waits()) as client:
            with pytest.raises(OutboundFailed, match="certificate") as info:
                await client.post_json(f"https://other.test:{server.port}/", BODY)
        assert (info.value.reason, info.value.retryable, info.value.attempts) == (
            "unavailable",
            False,
            1,
        )
        assert server.seen == []


async def test_cookies_from_one_receiver_are_never_sent_back(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(200, b"{}", {"set-cookie": "session=tenant-a; Path=/"}))
    await client.post_json(receiver.url, BODY)
    await client.post_json(receiver.url, BODY)
    assert all("cookie" not in seen.headers for seen in receiver.seen)


async def test_a_compressed_answer_is_refused_unread(
    client: OutboundClient, receiver: Receiver
) -> None:
    receiver.script(Reply(200, b"\x1f\x8b not really gzip", {"content-encoding": "gzip"}))
    with pytest.raises(OutboundFailed, match="content-encoding 'gzip'"):
        await client.post_json(receiver.url, BODY)


async def test_header_values_stay_out_of_errors_and_logs(
    client: OutboundClient, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    token = "tok-4f9a8b7c6d5e"

    def echo(seen: Seen) -> Reply:
        return Reply(500, f"bad token {seen.headers['authorization']}".encode())

    receiver.script(echo)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OutboundFailed) as info:
        await client.post_json(receiver.url, BODY, {"Authorization": f"Bearer {token}"}, retries=0)
    assert "[redacted]" in info.value.detail
    assert token not in info.value.detail
    assert token not in info.value.excerpt
    assert token not in repr(info.value)
    assert all(token not in record.getMessage() for record in caplog.records)
    assert receiver.seen[0].headers["authorization"] == f"Bearer {token}"
