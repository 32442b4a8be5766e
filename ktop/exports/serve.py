"""`ktop --serve [ADDR:]PORT`: headless, /metrics for Prometheus, no TUI.

The HTTP server listens before the collectors start, so a scrape during start-up is answered
with what is ready and `ktop_up 0`. The page is rendered once per refresh (MetricsPage), so
a scrape costs a copy of bytes however often it comes; at most MAX_CLIENTS connections are
served at once (a further one gets 503), each dropped after CLIENT_TIMEOUT_S of silence,
and a client that goes away mid-response costs nothing but its own connection.
"""

from __future__ import annotations

import errno
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
MAX_CLIENTS = 8
CLIENT_TIMEOUT_S = 10.0
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
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"expected [ADDR:]PORT with a port from 1 to 65535, not {text!r}")
    if not host:
        raise ValueError(f"no address before the port in {text!r}")
    return host, int(port_text)


def _wants_openmetrics(accept: str) -> bool:
    return "application/openmetrics-text" in accept


class _MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer
    server_version = "ktop"
    protocol_version = "HTTP/1.1"  # Prometheus keeps its connection between scrapes
    timeout = CLIENT_TIMEOUT_S

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

    def __init__(self, address: tuple[str, int], page: MetricsPage, family: int,
                 say: Callable[[str], None]) -> None:
        self.address_family = family
        self.page = page
        self._say = say
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _MetricsHandler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread: give the slot back
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return  # the client left or went quiet: its loss
        self._say(f"error answering {client_address[0]}: {error}")


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
