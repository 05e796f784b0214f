"""A test PKI for SES through SNS: a CA the receiver pins (MAILBUS_SES_CA_FILE), a TLS
certificate for 127.0.0.1 under it, and an SNS-like signing pair; and a threaded https
server handing out the signing certificate, as ``sns.<region>.amazonaws.com`` does."""

from __future__ import annotations

import ipaddress
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

__all__ = ["CERT_PATH", "Pki", "make_pki", "serving_certificate"]

CERT_PATH = "/SimpleNotificationService.pem"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


@dataclass
class Pki:
    ca_file: Path
    server_context: ssl.SSLContext
    signing_key: rsa.RSAPrivateKey
    signing_pem: bytes


def make_pki(tmp_path: Path) -> Pki:
    """A CA, a TLS certificate for 127.0.0.1 under it, and an SNS-like signing pair."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test CA"))
        .issuer_name(_name("test CA"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    tls_key = ec.generate_private_key(ec.SECP256R1())
    tls = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(tls_key.public_key())
        .serial_number(2)
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    (tmp_path / "tls.pem").write_bytes(tls.public_bytes(pem))
    (tmp_path / "tls.key").write_bytes(
        tls_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.pem", tmp_path / "tls.key")
    signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signing = (
        x509.CertificateBuilder()
        .subject_name(_name("sns.amazonaws.com"))
        .issuer_name(ca.subject)
        .public_key(signing_key.public_key())
        .serial_number(3)
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    return Pki(ca_file, context, signing_key, signing.public_bytes(pem))


@contextmanager
def serving_certificate(pki: Pki) -> Iterator[str]:
    """https://127.0.0.1:PORT serving the signing certificate at :data:`CERT_PATH`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == CERT_PATH
            self.send_response(200 if found else 404)
            self.end_headers()
            if found:
                self.wfile.write(pki.signing_pem)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = pki.server_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
