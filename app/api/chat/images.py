"""A chat request's ``image_url`` parts as the images a model sees, checked and bounded.

    images = await gather_images(chat, settings, outbound)   # (message, part) → Image

A ``data:`` URL must be base64 of a PNG, JPEG, GIF or WebP image (its type read from its
bytes, and the URL's own type must agree). An ``http(s)`` URL is fetched by the service
through the outbound guard (docs/outbound.md: https, or http to an allowed host; no
private, loopback or metadata address, checked before and after DNS; no redirects),
read up to ``REPROMPT_MAX_IMAGE_BYTES`` and sniffed the same way; the provider gets the
bytes, never the URL, so a model server inside the network cannot be pointed anywhere.
Any other scheme (``file:``, ``ftp:``) is refused. At most ``REPROMPT_MAX_IMAGES`` images,
``REPROMPT_MAX_IMAGES_BYTES`` in all. Each refusal is a 400 naming the part.
"""

from __future__ import annotations

import base64
from typing import Final

from app.api.chat.errors import ChatError
from app.api.chat.request import ChatRequest, ImagePart
from app.core.turn.model import Image
from app.core.wire import codes
from app.core.wire.image import IMAGE_TYPES, decoded, sniff
from app.outbound.errors import OutboundError
from app.outbound.kit import Outbound
from app.settings import Settings

Images = dict[tuple[int, int], Image]
_KINDS: Final = "PNG, JPEG, GIF or WebP"


async def gather_images(chat: ChatRequest, settings: Settings, outbound: Outbound) -> Images:
    """Every image part of ``chat``, by (message index, part index), read and checked."""
    out: Images = {}
    total = 0
    for i, message in enumerate(chat.messages):
        if isinstance(message.content, str) or message.content is None:
            continue
        for j, part in enumerate(message.content):
            if not isinstance(part, ImagePart):
                continue
            param = f"messages[{i}].content[{j}]"
            if message.role != "user":
                raise _bad(param, "image parts go in user messages only")
            if len(out) >= settings.max_images:
                raise _bad(param, f"at most {settings.max_images} images in a request")
            image = await _read(part.image_url.url, param, settings, outbound)
            size = len(image.data) * 3 // 4 - image.data[-2:].count("=")
            total += size
            if total > settings.max_images_bytes:
                raise _bad(
                    param,
                    f"the images are over {settings.max_images_bytes} bytes in all "
                    "(REPROMPT_MAX_IMAGES_BYTES)",
                )
            out[(i, j)] = image
    return out


async def _read(url: str, param: str, settings: Settings, outbound: Outbound) -> Image:
    scheme = url.partition(":")[0].lower() if ":" in url else ""
    if scheme == "data":
        return _data_url(url, param, settings.max_image_bytes)
    if scheme not in ("http", "https"):
        raise _bad(param, "an image_url is an https (or http) URL or a data: URL")
    refused = outbound.guard.check_url(url)
    if refused is not None:
        raise _bad(param, refused)
    try:
        response = await outbound.client.get(
            url,
            timeout_s=outbound.guard.policy.timeout_s,
            max_bytes=settings.max_image_bytes,
        )
    except OutboundError as exc:
        raise _bad(param, f"the image could not be fetched: {exc.detail}") from None
    kind = sniff(response.body[:16])
    if kind is None:
        raise _bad(param, f"the URL's answer is not a {_KINDS} image")
    return Image(kind, base64.b64encode(response.body).decode("ascii"))


def _data_url(url: str, param: str, max_bytes: int) -> Image:
    head, comma, data = url.partition(",")
    media_type, _, encoding = head.removeprefix("data:").partition(";")
    if not comma or encoding.lower() != "base64":
        raise _bad(param, "a data: URL must be data:<image type>;base64,<data>")
    if media_type.lower() not in IMAGE_TYPES:
        raise _bad(param, f"a data: URL must hold a {_KINDS} image, not {media_type[:40]!r}")
    if len(data) * 3 // 4 > max_bytes + 2:
        raise _bad(param, f"the image is over {max_bytes} bytes (REPROMPT_MAX_IMAGE_BYTES)")
    try:
        raw = decoded(data)
    except ValueError:
        raise _bad(param, "the data: URL's data is not base64") from None
    if len(raw) > max_bytes:
        raise _bad(param, f"the image is over {max_bytes} bytes (REPROMPT_MAX_IMAGE_BYTES)")
    kind = sniff(raw[:16])
    if kind != media_type.lower():
        raise _bad(param, f"the data is not a {media_type[:40]} image")
    return Image(kind, data)


def _bad(param: str, why: str) -> ChatError:
    return ChatError(400, codes.INVALID_INPUT, f"{param}: {why}", param=param)
