"""`ktop --serve [ADDR:]PORT`: headless, /metrics for Prometheus, no TUI.

The HTTP server listens before the collectors start, so a scrape during start-up is answered
with what is ready and `ktop_up 0`. The page is rendered once per refresh (MetricsPage), so
a scrape costs a copy of bytes however often it comes. At most MAX_CLIENTS connections are
open at once: a further one takes the place of the one longest waiting for its request (idle
or slow sockets alone never fill the server), or gets 503 when all are being answered. Each
connection has REQUEST_DEADLINE_S for a whole request (a header line every few seconds does
not hold it), and a client that goes away mid-response costs nothing but its own connection.
Responses go out without Nagle's delay: headers and body are two writes, and a keep-alive
client's delayed ACK would hold the body 40 ms.
"""

from __future__ import annotations

import errno
import io
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from ktop.exports.openmetrics import OPENMETRICS_TEXT, PROMETHEUS_TEXT, MetricsPage

if TYPE_CHECKING:
    from ktop.engine import DataSource

DEFAULT_HOST = "127.0.0.1"  # only this machine unless an address is given: see parse_address
MAX_CLIENTS = 16
REQUEST_DEADLINE_S = 10.0  # from a connection's start or its last answer to a whole request
SEND_TIMEOUT_S = 10.0  # a client that stops reading its answer
EVICT_AFTER_S = 0.5  # a scraper sends its request at once: waiting longer, it may give way
LISTEN_BACKLOG = 128  # a burst of scrapers is queued, not left to retry SYNs for seconds
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Content-Length: 19\r\nConnection: close\r\n\r\nktop: too many now\n")


class ServeError(Exception):
    """One line naming the problem and the fix."""


def parse_address(text: str) -> tuple[str, int]:
    """[ADDR:]PORT -> (host, port). PORT alone serves this machine only (127.0.0.1): ktop
    runs as root and names processes; `0.0.0.0:PORT` (or `:PORT`) serves every interface,
    `[::1]:PORT` an IPv6 address. Raises ValueError with what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    elif host == "":
        host = "0.0.0.0"
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, as [{host}]:{port_text}")
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"expected [ADDR:]PORT with a port from 1 to 65535, not {text!r}")
    if not host:
        raise ValueError(f"no address before the port in {text!r}")
    return host, int(port_text)


def _wants_openmetrics(accept: str) -> bool:
    return "application/openmetrics-text" in accept


class _DeadlineIO(socket.SocketIO):
    """A socket's reads bounded by one deadline for a whole request, not per read."""

    def __init__(self, connection: socket.socket) -> None:
        super().__init__(connection, "rb")
        self._connection = connection
        self.deadline = 0.0

    def readinto(self, b) -> int | None:  # type: ignore[override]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole request in time")
        self._connection.settimeout(left)
        return super().readinto(b)


class _MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer
    server_version = "ktop"
    protocol_version = "HTTP/1.1"  # Prometheus keeps its connection between scrapes
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket stays open: ours reads it under the deadline
        self._reader = _DeadlineIO(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + REQUEST_DEADLINE_S
        self.server.waiting(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # the request line was read; this reads the headers
        self.connection.settimeout(SEND_TIMEOUT_S)
        self.server.answering(self.connection)
        return parsed

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            openmetrics = _wants_openmetrics(self.headers.get("Accept", ""))
            body = self.server.page.body(openmetrics)
            kind = OPENMETRICS_TEXT if openmetrics else PROMETHEUS_TEXT
            status = 200
        elif path == "/":
            body, kind, status = b"ktop: metrics at /metrics\n", "text/plain; charset=utf-8", 200
        else:
            body, kind, status = b"ktop: no such page; metrics at /metrics\n", "text/plain", 404
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape every few seconds is no news


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # a restart binds at once; a live listener still refuses

    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], page: MetricsPage, family: int,
                 say: Callable[[str], None]) -> None:
        self.address_family = family
        self.page = page
        self._say = say
        self._lock = threading.Lock()
        # Open connections: since when each waits for its request (None: being answered).
        self._open: dict[socket.socket, float | None] = {}
        super().__init__(address, _MetricsHandler)

    def waiting(self, connection: socket.socket) -> None:
        with self._lock:
            if connection in self._open:
                self._open[connection] = time.monotonic()

    def answering(self, connection: socket.socket) -> None:
        with self._lock:
            if connection in self._open:
                self._open[connection] = None

    def _make_room(self) -> bool:
        """Room for one more connection: the one longest waiting for its request gives way
        (closed under the lock, so it cannot start being answered meanwhile)."""
        now = time.monotonic()
        with self._lock:
            if len(self._open) < MAX_CLIENTS:
                return True
            waiting = [(since, c) for c, since in self._open.items()
                       if since is not None and now - since >= EVICT_AFTER_S
                       and not _unread(c)]
            if not waiting:
                return False
            _, oldest = min(waiting, key=lambda pair: pair[0])
            del self._open[oldest]
            try:
                oldest.shutdown(socket.SHUT_RDWR)  # its thread reads the end and leaves
            except OSError:
                pass
            return True

    def process_request(self, request, client_address) -> None:
        if not self._make_room():
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._lock:
            self._open[request] = time.monotonic()
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread: not open
            self._forget(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: socket.socket) -> None:
        with self._lock:
            self._open.pop(request, None)

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return  # the client left or went quiet: its loss
        self._say(f"error answering {client_address[0]}: {error}")


def _unread(connection: socket.socket) -> bool:
    """Bytes wait in the connection that its thread has not read yet (a busy machine): a
    request on its way to an answer, not an idle client. Asked by poll first: a socket with
    a timeout (its thread's deadline) makes even a MSG_DONTWAIT recv wait for data, up to
    that timeout (a scrape waited 9 s behind idle connections, under the server's lock)."""
    try:
        poller = select.poll()
        poller.register(connection, select.POLLIN)
        if not poller.poll(0):
            return False
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except OSError:  # the connection is gone
        return False


def bind(host: str, port: int, page: MetricsPage, say: Callable[[str], None]) -> MetricsServer:
    """Listen on host:port, or raise ServeError saying why not and what to do."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ServeError(
            f"cannot serve on {where}: {e.strerror}; give an address of this machine, "
            f"e.g. 127.0.0.1:{port} or 0.0.0.0:{port}"
        ) from None
    family, _, _, _, address = infos[0]
    try:
        return MetricsServer(address[:2], page, family, say)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            fix = "another program listens there; choose another port"
        elif e.errno == errno.EADDRNOTAVAIL:
            fix = f"not an address of this machine; try 127.0.0.1:{port} or 0.0.0.0:{port}"
        elif e.errno == errno.EACCES:
            fix = "ports below 1024 need root; choose a port above 1023"
        else:
            fix = f"try another address or port ({e.strerror})"
        raise ServeError(f"cannot serve on {where}: {e.strerror or e}: {fix}") from None


def serve(
    server: MetricsServer,
    source: DataSource,
    interval_s: float,
    stop: threading.Event,
) -> None:
    """Serve in a thread while the source is collected every interval, until `stop`. The
    collects keep to a fixed schedule, not an interval's sleep after each: on saturated
    CPUs a collect takes a good part of a second, and sleeping a whole interval after it made
    the page seconds stale and its counters advance in uneven steps, which rate() reads
    short. A collect that overruns its interval is followed by the next at once; and the
    counters carry the time they were drained at, so rate() is right whatever the lateness."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="ktop-metrics", daemon=True)
    thread.start()
    try:
        source.start(wait=False)
        due = time.monotonic()
        while not stop.is_set():
            counted_at = time.time()  # the collectors are drained as collect() begins
            server.page.update(source.collect(), counted_at=counted_at)
            due += interval_s
            now = time.monotonic()
            if due < now:  # late: collect now, and keep the schedule from here
                due = now
            stop.wait(due - now)
    finally:
        server.shutdown()
        server.server_close()
        source.close()
        thread.join(timeout=2.0)
