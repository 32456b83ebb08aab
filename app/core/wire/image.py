"""Images a model sees with the task (#34: the chat front door's ``image_url`` parts).

    kind = sniff(raw)                  # "image/png", … from the bytes themselves; None: not one
    spec = ImageSpec(media_type="image/png", data=base64_text)

An image is kept once, in the job's spec, as base64; every model call sends it with the
task and no turn record repeats it. Its type is read from its first bytes, never taken
from a name or a header; the caps (count, bytes each, bytes in all) are the service's
(``REPROMPT_MAX_IMAGES``, ``_MAX_IMAGE_BYTES``, ``_MAX_IMAGES_BYTES``), checked at
admission.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, Literal

from pydantic import Field, StrictStr, model_validator

from app.core.wire.base import Wire

ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
IMAGE_TYPES: Final[tuple[ImageType, ...]] = ("image/png", "image/jpeg", "image/gif", "image/webp")
# No image is larger than this whatever the settings say (base64 characters).
MAX_DATA_CHARS: Final = 64 << 20


def sniff(raw: bytes) -> ImageType | None:
    """The image type of ``raw`` by its signature, None when it is none of the four."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(raw) >= 12 and raw.startswith(b"RIFF") and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def decoded(data: str) -> bytes:
    """The bytes of base64 ``data``; ValueError when it is not base64."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


class ImageSpec(Wire):
    """One image, base64, of a type its bytes show."""

    media_type: ImageType = Field(description="image/png, image/jpeg, image/gif or image/webp.")
    data: StrictStr = Field(max_length=MAX_DATA_CHARS, description="The image, base64.")

    @model_validator(mode="after")
    def _is_that_image(self) -> ImageSpec:
        if sniff(decoded(self.data)[:16]) != self.media_type:
            raise ValueError(f"data is not a {self.media_type} image")
        return self

    @property
    def size(self) -> int:
        """The image's bytes (from the base64 length)."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")
