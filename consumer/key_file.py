"""An API key kept in a file (``MAILBUS_PROVIDER_API_KEY_FILE``), read again when the file
changes, so a rotated or re-issued key takes effect without a restart (docs/runbook.md).

Before a call the provider asks :meth:`KeyFile.current`; at most once per ``interval_s``
that looks at the file's identity (device, inode, size, modification time: one ``stat``,
which follows a Kubernetes secret's ``..data`` symlink swap) and reads the file only when
it changed. A file that cannot be read, is empty (a write caught half way) or holds
whitespace inside the key leaves the key in use unchanged, with a warning, and is looked at
again at the next check. Every key read is registered with the log masking.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from mailbus.kernel.logs import register_secret

__all__ = ["KeyFile"]

log = logging.getLogger(__name__)

_Identity = tuple[int, int, int, int]


class KeyFile:
    """The key in ``path``, ``key`` (as read at start-up) until the file changes."""

    def __init__(
        self,
        path: str,
        key: str,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._key = key
        self._interval_s = interval_s
        self._clock = clock
        self._checked_at = clock()
        self._identity = self._stat()

    def current(self) -> str:
        """The key to send now (cheap: a clock read, and a ``stat`` once per interval)."""
        now = self._clock()
        if now - self._checked_at < self._interval_s:
            return self._key
        self._checked_at = now
        identity = self._stat()
        if identity is None or identity == self._identity:
            return self._key
        try:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read the API key file %s (%s): the key stays", self.path, exc)
            return self._key
        if not text or any(ch.isspace() for ch in text):
            log.warning("the API key file %s holds no usable key: the key stays", self.path)
            return self._key
        self._identity = identity
        if text != self._key:
            register_secret(text)
            log.info("the API key file %s changed: using the new key from now on", self.path)
            self._key = text
        return self._key

    def _stat(self) -> _Identity | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
