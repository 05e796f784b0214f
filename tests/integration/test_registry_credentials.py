"""The schema registry's credentials and CA (MAILBUS_SCHEMA_REGISTRY_AUTH(_FILE),
MAILBUS_SCHEMA_REGISTRY_CA_FILE) reach the registry through the real client: an HTTPS
server with the stack's certificate records what each request carried."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from transport_security import stack_security

from mailbus.kernel.settings import load_settings
from mailbus.schemas.registry import settings_registry_client

pytestmark = pytest.mark.stack


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append(self.headers.get("Authorization"))
        body = json.dumps(["mailbus.send.p0-value"]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def registry() -> Iterator[tuple[str, str]]:
    """An HTTPS registry stand-in on a free port; yields its URL and the CA that signed it."""
    tls = Path(stack_security().ca).parent
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "server.pem", tls / "server.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.seen = []
    try:
        yield f"https://localhost:{server.server_address[1]}", str(tls / "ca.pem")
    finally:
        server.shutdown()
        server.server_close()


def test_credentials_from_a_file_and_the_ca_reach_the_registry(
    registry: tuple[str, str], tmp_path: Path
) -> None:
    url, ca = registry
    secret = tmp_path / "registry-auth"
    secret.write_text("mailbus:s3cret-registry-password\n")
    settings = load_settings(
        {
            "MAILBUS_SCHEMA_REGISTRY_URL": url,
            "MAILBUS_SCHEMA_REGISTRY_AUTH_FILE": str(secret),
            "MAILBUS_SCHEMA_REGISTRY_CA_FILE": ca,
        }
    )
    assert settings_registry_client(settings).get_subjects() == ["mailbus.send.p0-value"]
    expected = base64.b64encode(b"mailbus:s3cret-registry-password").decode()
    assert _Recorder.seen == [f"Basic {expected}"]


def test_without_the_ca_the_registry_certificate_is_refused(registry: tuple[str, str]) -> None:
    url, _ca = registry
    settings = load_settings({"MAILBUS_SCHEMA_REGISTRY_URL": url})
    with pytest.raises(Exception, match=r"(?i)certificate"):  # the client's own httpx error
        settings_registry_client(settings).get_subjects()
    assert _Recorder.seen == []  # the request never reached it


def test_a_missing_ca_file_is_a_configuration_error(tmp_path: Path) -> None:
    from mailbus.kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="MAILBUS_SCHEMA_REGISTRY_CA_FILE"):
        load_settings(
            {
                "MAILBUS_SCHEMA_REGISTRY_URL": "https://localhost:1",
                "MAILBUS_SCHEMA_REGISTRY_CA_FILE": str(tmp_path / "nothing.pem"),
            }
        )
