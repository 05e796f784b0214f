"""The HTTP side of SNS: fetching signing certificates (cached) and confirming a
subscription by visiting its ``SubscribeURL``, only ever over https to an allowed host
(:func:`mailbus.providers.ses.events.allowed_url`). TLS trusts the system's CAs, or only the CA file
given (``MAILBUS_SES_CA_FILE``: a pinned CA, as the tests use). aiohttp errors become
:class:`FetchError` values, which the route answers with 503
(:class:`mailbus.feedback.native.routes.Unreachable`)."""

from __future__ import annotations

import ssl

import aiohttp

from mailbus.feedback.native.routes import Unreachable
from mailbus.providers.ses.events import allowed_url

__all__ = ["CertificateSource", "FetchError"]

MAX_CERTIFICATE = 64 * 1024
_CACHED = 64


class FetchError(Unreachable):
    """A certificate or a subscription URL that could not be reached or was refused."""


class CertificateSource:
    def __init__(self, hosts: frozenset[str], ca_file: str | None = None) -> None:
        self.hosts = hosts
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._certificates: dict[str, bytes] = {}
        self._session: aiohttp.ClientSession | None = None

    async def certificate(self, url: str) -> bytes:
        """The PEM at ``url``, fetched once per URL (SNS rotates by URL)."""
        if url in self._certificates:
            return self._certificates[url]
        pem = await self._get(url)
        if len(self._certificates) >= _CACHED:
            self._certificates.pop(next(iter(self._certificates)))
        self._certificates[url] = pem
        return pem

    async def confirm(self, url: str) -> None:
        """Visit the ``SubscribeURL`` of a verified subscription confirmation."""
        await self._get(url)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _get(self, url: str) -> bytes:
        if not allowed_url(url, self.hosts):
            raise FetchError(f"refused: {url!r} is not https on an allowed host")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._session.get(url, ssl=self._ssl, allow_redirects=False) as response:
                if response.status != 200:
                    raise FetchError(f"{url}: HTTP {response.status}")
                return await response.content.read(MAX_CERTIFICATE)
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as exc:
            raise FetchError(f"{url}: {exc}") from None
