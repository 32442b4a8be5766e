"""`ktop --serve [ADDR:]PORT`: headless, /metrics for Prometheus, no TUI.

The HTTP server listens before the collectors start, so a scrape during start-up is answered
with what is ready and `ktop_up 0`. The page is rendered once per refresh (MetricsPage), so
a scrape costs a copy of bytes however often it comes: one thread serves every connection
from one event loop (selectors, non-blocking sockets), so a connection costs a descriptor
and a few hundred bytes, not a thread, and nothing a client does (not reading, reading
slowly, pipelining requests, dribbling headers) blocks the others. Each connection has
REQUEST_DEADLINE_S for a whole request (from its start or its last answer) and
SEND_DEADLINE_S for a whole answer, and is closed past either. Answers go out one at a
time per connection (pipelined requests wait, unread, in the client's own socket), so a
client that never reads holds one page, never more. At most MAX_CLIENTS connections are
open at once: a further one takes the place of the one longest in its present turn (its
wait for a request, or its answer), if EVICT_AFTER_S at least, or gets 503 when every one
is in a younger turn. Responses go out without Nagle's delay.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ktop.exports.openmetrics import OPENMETRICS_TEXT, PROMETHEUS_TEXT, MetricsPage
from ktop.text import printable

if TYPE_CHECKING:
    from ktop.engine import DataSource

DEFAULT_HOST = "127.0.0.1"  # only this machine unless an address is given: see parse_address
MAX_CLIENTS = 256  # open connections; each costs a descriptor (the process scan needs many)
REQUEST_DEADLINE_S = 10.0  # from a connection's start or its last answer to a whole request
SEND_DEADLINE_S = 10.0  # for a whole answer: a client that stops reading loses its connection
EVICT_AFTER_S = 0.5  # a scraper sends its request and reads its answer at once
LISTEN_BACKLOG = 128  # a burst of scrapers is queued, not left to retry SYNs for seconds
MAX_REQUEST_BYTES = 16384  # a request's line and headers: a scraper's are a few hundred
ACCEPTS_PER_TURN = 64  # one turn of the loop accepts at most this many, then serves the rest
ANSWERS_PER_TURN = 4  # pipelined requests of one connection answered in one turn
SWEEP_EVERY_S = 0.1  # how often deadlines are checked
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Content-Length: 19\r\nConnection: close\r\n\r\nktop: too many now\n")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 505: "HTTP Version Not Supported"}


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


@dataclass(eq=False, slots=True)
class _Connection:
    sock: socket.socket
    # When its present turn began: its wait for a request (from its start or its last
    # answer), or its answer. Bytes trickling in or out do not renew it.
    since: float
    deadline: float
    received: bytearray = field(default_factory=bytearray)
    answer: list[memoryview] = field(default_factory=list)  # what is left to send
    close_after: bool = False
    pending: bool = False  # requests received whole and not answered yet (a pipeline)
    interest: int = selectors.EVENT_READ

    @property
    def answering(self) -> bool:
        return bool(self.answer)


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]


def _parse_request(head: bytes) -> _Request | int:
    """The request line and headers (without the blank line), or the status to refuse with."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        return 505
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, text = line.rstrip("\r").partition(":")
        if not colon or not name or name != name.strip():
            return 400
        headers[name.lower()] = text.strip()
    return _Request(method, target, version, headers)


def _keeps_alive(request: _Request) -> bool:
    tokens = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    if request.version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


class MetricsServer:
    """The event loop serving /metrics: serve_forever() in a thread, shutdown() from
    another, then server_close(). `socket` is the listening socket."""

    def __init__(self, address: tuple[str, int], page: MetricsPage, family: int,
                 say: Callable[[str], None]) -> None:
        self.page = page
        self._say = say
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            # A restart binds at once; a live listener still refuses.
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(LISTEN_BACKLOG)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ, None)
        self._open: dict[socket.socket, _Connection] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._listening_paused_until = 0.0

    # ---- the loop ------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.2) -> None:
        self._stopped.clear()
        try:
            swept = time.monotonic()
            while not self._stop.is_set():
                now = time.monotonic()
                if self._listening_paused_until and now >= self._listening_paused_until:
                    self._listening_paused_until = 0.0
                    self._selector.register(self.socket, selectors.EVENT_READ, None)
                wait = min(poll_interval, SWEEP_EVERY_S)
                for key, _mask in self._selector.select(wait):
                    if key.data is None:
                        self._accept()
                    else:
                        self._serve(key.data)
                now = time.monotonic()
                if now - swept >= SWEEP_EVERY_S:
                    swept = now
                    self._sweep(now)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serve_forever() and wait for it to return."""
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        for connection in list(self._open.values()):
            self._close(connection)
        self._selector.close()
        self.socket.close()

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, _address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: the backlog keeps them; one idle connection gives
                    # way, and the listener rests a moment rather than spin.
                    self._evict(time.monotonic())
                    self._listening_paused_until = time.monotonic() + SWEEP_EVERY_S
                    self._selector.unregister(self.socket)
                return  # ECONNABORTED and the like: that client's loss
            now = time.monotonic()
            if len(self._open) >= MAX_CLIENTS and not self._evict(now):
                try:
                    sock.setblocking(False)
                    sock.send(_BUSY)
                except OSError:
                    pass
                sock.close()
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # not TCP (a test's socketpair), or already gone
            connection = _Connection(sock, now, now + REQUEST_DEADLINE_S)
            self._open[sock] = connection
            self._selector.register(sock, selectors.EVENT_READ, connection)

    def _evict(self, now: float) -> bool:
        """Room for one more: the connection longest in its present turn gives way, if that
        is EVICT_AFTER_S at least (a scraper's request and answer take milliseconds: one
        this long is idle, dribbling its headers, or not reading its answer, however it
        trickles). False if every one is busy with a turn younger than that."""
        stalled = [c for c in self._open.values() if now - c.since >= EVICT_AFTER_S]
        if not stalled:
            return False
        self._close(min(stalled, key=lambda c: c.since))
        return True

    def _sweep(self, now: float) -> None:
        for connection in [c for c in self._open.values() if now >= c.deadline]:
            self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if self._open.pop(connection.sock, None) is None:
            return
        try:
            self._selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()

    # ---- one connection ------------------------------------------------------------------

    def _serve(self, connection: _Connection) -> None:
        try:
            if not connection.answering and not connection.pending:
                data = connection.sock.recv(MAX_REQUEST_BYTES)
                if not data:
                    self._close(connection)
                    return
                connection.received += data
            self._progress(connection)
        except OSError:  # the client left or reset: its loss
            self._close(connection)
        except Exception as e:  # a bug: this connection ends, the server goes on
            self._say(f"error answering a client: {printable(repr(e))[:200]}")
            self._close(connection)

    def _progress(self, connection: _Connection) -> None:
        """Send what is due, then answer the next request received whole, a few at most
        (a client pipelining hundreds waits its turn behind the others)."""
        connection.pending = False
        for _ in range(ANSWERS_PER_TURN):
            if connection.answering:
                if not self._send(connection):
                    break  # the client must read first, or is gone
            elif not self._next_request(connection):
                break  # no request whole yet
        else:
            connection.pending = True  # more to do: back when the socket is writable
        if connection.sock.fileno() < 0:
            return  # closed
        interest = (selectors.EVENT_WRITE if connection.answering or connection.pending
                    else selectors.EVENT_READ)
        if interest != connection.interest:
            connection.interest = interest
            self._selector.modify(connection.sock, interest, connection)

    def _next_request(self, connection: _Connection) -> bool:
        """Put the answer to the request received whole, if there is one, in its place."""
        received = connection.received
        end, skip = received.find(b"\r\n\r\n"), 4
        if end < 0:
            end, skip = received.find(b"\n\n"), 2
        if end < 0 and len(received) <= MAX_REQUEST_BYTES:
            return False
        if end < 0 or end > MAX_REQUEST_BYTES:
            self._answer(connection, 431, b"ktop: request too long\n", "text/plain", True)
            return True
        head = bytes(received[:end]).lstrip(b"\r\n")
        del received[: end + skip]
        request = _parse_request(head)
        if isinstance(request, int):
            self._answer(connection, request, b"ktop: not an HTTP request\n", "text/plain", True)
            return True
        # A request with a body is answered, then the connection closed: none is expected.
        close = (not _keeps_alive(request) or "transfer-encoding" in request.headers
                 or request.headers.get("content-length", "0") not in ("", "0"))
        if request.method not in ("GET", "HEAD"):
            self._answer(connection, 405, b"ktop: GET /metrics\n", "text/plain", close,
                         extra="Allow: GET, HEAD\r\n")
            return True
        path = request.target.split("?", 1)[0]
        if path == "/metrics":
            openmetrics = _wants_openmetrics(request.headers.get("accept", ""))
            body = self.page.body(openmetrics)
            kind, status = (OPENMETRICS_TEXT if openmetrics else PROMETHEUS_TEXT), 200
        elif path == "/":
            body, kind, status = b"ktop: metrics at /metrics\n", "text/plain; charset=utf-8", 200
        else:
            body, kind, status = b"ktop: no such page; metrics at /metrics\n", "text/plain", 404
        self._answer(connection, status, body, kind, close, head_only=request.method == "HEAD")
        return True

    def _answer(self, connection: _Connection, status: int, body: bytes, kind: str,
                close: bool, head_only: bool = False, extra: str = "") -> None:
        ending = "Connection: close\r\n" if close else ""
        head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nServer: ktop\r\n"
                f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n{extra}{ending}"
                "\r\n").encode()
        connection.answer = [memoryview(head)]
        if body and not head_only:
            connection.answer.append(memoryview(body))  # the page itself, not a copy
        connection.close_after = close
        now = time.monotonic()
        connection.since = now
        connection.deadline = now + SEND_DEADLINE_S

    def _send(self, connection: _Connection) -> bool:
        """Send what the socket takes of the answer: True if it is all sent and the
        connection stays open for the next request."""
        try:
            sent = connection.sock.sendmsg(connection.answer)
        except BlockingIOError:
            return False
        while sent:
            first = connection.answer[0]
            if sent < len(first):
                connection.answer[0] = first[sent:]
                break
            sent -= len(first)
            connection.answer.pop(0)
        if connection.answer:
            return False
        if connection.close_after:
            self._close(connection)
            return False
        connection.since = time.monotonic()
        connection.deadline = connection.since + REQUEST_DEADLINE_S
        return True


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
