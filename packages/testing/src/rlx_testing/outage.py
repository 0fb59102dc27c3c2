"""`OutageProxy`: a TCP proxy on 127.0.0.1 that stages a real outage of an HTTP server (moto,
gcp-storage-emulator) or loses the answers of chosen requests."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

__all__ = ["OutageProxy"]


class OutageProxy:
    """A TCP proxy on 127.0.0.1 in front of the HTTP server `upstream` ("http://host:port").

    `down()` closes its port (new connections are refused) and cuts every open connection;
    `up()` listens again on the same port. The server behind it keeps running with its state,
    so this is an outage as a client sees one, not a restart. `drop_responses(*needles, count=n)`:
    the next `n` requests whose first bytes contain every needle (b"PUT ", b"/u1.rec") reach the
    server, but their connection is cut before the response comes back (a write that landed,
    reported as failed).
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").rstrip("/").rpartition(":")
        self._upstream = (host, int(port))
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._drop: list[tuple[tuple[bytes, ...], int]] = []
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._timers: list[threading.Timer] = []
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen (again, on the same port)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._accepting is not None:
            self._accepting.join()
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            _cut(sock)

    def down_for(self, seconds: float) -> threading.Thread:
        """`down()` now and `up()` after `seconds`, in a thread (returned, to join)."""
        self.down()
        timer = threading.Timer(seconds, self.up)
        self._timers.append(timer)
        timer.start()
        return timer

    def drop_responses(self, *needles: bytes, count: int = 1) -> None:
        with self._lock:
            self._drop.append((needles, count))

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
            timer.join()
        self.down()

    def _accept(self, listener: socket.socket) -> None:
        listener.settimeout(0.05)
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                _cut(client)
                continue
            with self._lock:
                self._open |= {client, server}
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()

    def _take_drop(self, data: bytes) -> bool:
        with self._lock:
            for i, (needles, count) in enumerate(self._drop):
                if all(n in data[:4096] for n in needles):
                    self._drop[i] = (needles, count - 1)
                    self._drop = [d for d in self._drop if d[1] > 0]
                    return True
        return False

    def _pipe(self, client: socket.socket, server: socket.socket) -> None:
        """Both directions of one connection, until either side closes."""
        client.settimeout(None)
        server.settimeout(None)
        dropping = False
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 1.0)
                for sock in ready:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    if sock is client:
                        dropping = dropping or self._take_drop(data)
                        server.sendall(data)
                    elif dropping:
                        return  # the request landed; its answer never arrives
                    else:
                        client.sendall(data)
        except (OSError, ValueError):  # cut by down(), or by the other side
            return
        finally:
            with self._lock:
                self._open -= {client, server}
            _cut(client)
            _cut(server)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
