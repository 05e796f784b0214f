"""A TCP proxy on loopback whose link can be cut: a database outage for one process only,
while the shared PostgreSQL keeps serving everyone else. :meth:`TcpProxy.black_hole`
drops every byte instead, answering nothing and resetting nothing (a failover that moved
an address, a partition): calls hang until a timeout notices."""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._holed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until :meth:`restore`."""
        self._up.clear()
        with self._lock:
            for sock in self._sockets:
                _close(sock)
            self._sockets.clear()

    def black_hole(self) -> None:
        """Drop every byte both ways and hold new connections unanswered, until
        :meth:`restore` (which resets what was held)."""
        self._holed.set()

    def restore(self) -> None:
        if self._holed.is_set():
            self.cut()  # what crossed the hole is lost: those connections are gone
            self._holed.clear()
        self._up.set()

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._up.is_set():
                client.close()
                continue
            if self._holed.is_set():
                with self._lock:
                    self._sockets.add(client)  # accepted, never answered
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if not self._holed.is_set():
                    sink.sendall(chunk)
        for sock in (source, sink):
            _close(sock)


def _close(sock: socket.socket) -> None:
    """Shut down, then close: a close alone, while another thread is blocked reading the
    socket, sends nothing to the peer (the kernel keeps the file open for that read)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
