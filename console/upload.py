"""An uploaded audience CSV, received whole before anything is created.

The upload is written to a temporary file as it arrives (memory stays flat), counted and
hashed; over ``MAILBUS_CONSOLE_UPLOAD_MAX_BYTES`` or ``MAILBUS_CONSOLE_UPLOAD_MAX_ROWS``
it is refused at once. Only a body read to its closing boundary becomes a campaign, so an
upload cut off half-way (the browser closed, the network gone) creates nothing; the
campaign's audience names the file's size and SHA-256, so the same name uploaded again
with another audience is refused, and with the same one gives that campaign again (its
import resumed if the console stopped half-way), as `mailbus campaign create` does.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import IO

from mailbus.kernel.errors import MailbusError

__all__ = ["Received", "UploadRefused", "field_text", "receive"]


class UploadRefused(MailbusError):
    """The upload is over a limit or incomplete: nothing was created."""


@dataclass
class Received:
    file: IO[bytes]  # at its start; the caller closes it (the file is then gone)
    size: int
    sha256: str
    lines: int  # the header included

    def audience(self, filename: str) -> str:
        """What the campaign's ``audience`` says of it (compared when a name is reused)."""
        return f"upload: {filename}, {self.size} bytes, sha256 {self.sha256}"


async def receive(chunks: AsyncIterator[bytes], max_bytes: int, max_rows: int) -> Received:
    """The whole of ``chunks`` in a temporary file; :class:`UploadRefused` over a limit."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - returned open, or closed below
    digest = hashlib.sha256()
    size = breaks = 0
    last = b"\n"
    try:
        async for chunk in chunks:
            size += len(chunk)
            breaks += chunk.count(b"\n")
            if size > max_bytes:
                raise UploadRefused(
                    f"the audience is larger than {max_bytes} bytes"
                    " (MAILBUS_CONSOLE_UPLOAD_MAX_BYTES): nothing was created"
                )
            if breaks - 1 > max_rows:  # the header's line break is not a recipient
                raise _too_many(max_rows)
            digest.update(chunk)
            spool.write(chunk)
            last = chunk[-1:] or last
    except BaseException:
        spool.close()
        raise
    lines = breaks + (last != b"\n")
    if lines - 1 > max_rows:
        spool.close()
        raise _too_many(max_rows)
    spool.seek(0)
    return Received(spool, size, digest.hexdigest(), lines)


async def field_text(chunks: AsyncIterator[bytes], limit: int) -> str:
    """A form field's text (the token, the name, …): :class:`UploadRefused` over ``limit``."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > limit:
            raise UploadRefused(
                f"a form field is larger than {limit} bytes (MAILBUS_CONSOLE_MAX_BODY)"
            )
    return data.decode("utf-8", errors="replace")


def _too_many(max_rows: int) -> UploadRefused:
    return UploadRefused(
        f"the audience has more than {max_rows} recipient lines"
        " (MAILBUS_CONSOLE_UPLOAD_MAX_ROWS): nothing was created"
    )
