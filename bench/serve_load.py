#!/usr/bin/env python3
"""`ktop --serve` under a fleet's scrapers: 200 keep-alive clients on 127.0.0.1, each
scraping /metrics every second for 30 s (issue 44 item 10).

Each client keeps one connection, as Prometheus does, and sends `GET /metrics` every
--period seconds (the clients' first scrapes spread over the first period), reading each
answer whole before the next; a connection the server closed between scrapes is opened again
(as Prometheus' client does), not counted. Every scrape due in the run is counted once: 200
with the page, 503, reset or closed mid-answer, or no whole answer within --timeout (10 s,
Prometheus' default scrape_timeout). Latency is from the request's send to the answer's last
byte, as this one-threaded client sees it (its own queueing included, so an upper bound).
ktop's CPU (utime+stime, 100% = one CPU) is measured over the load and over as long a
quiet span before it, so what serving costs is the difference.

ktop runs live (root, all panes, BPF compiled on a first start) unless --replay FILE serves
a recording's page (any user). --ktop PATH (repeatable) names checkouts to compare, each run
with its own .venv, one after the other: `--ktop /old/checkout --ktop .`.

Usage: python bench/serve_load.py [--clients 200] [--seconds 30] [--period 1] [--replay F]
Exit 1 if any scrape was not answered 200 with the page. Loopback only, bounded loops.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import os
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCALHOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0  # a live ktop compiles its BPF programs on a first start
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n"
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Client:
    due: float  # when its next scrape is due
    sock: socket.socket | None = None
    connecting: bool = False
    sent_at: float = 0.0  # 0: no scrape in flight
    received: bytearray = field(default_factory=bytearray)


@dataclass
class Outcome:
    latencies: list[float] = field(default_factory=list)  # of the scrapes answered 200
    statuses: dict[str, int] = field(default_factory=dict)
    page_bytes: int = 0
    reconnects: int = 0

    def count(self, what: str) -> None:
        self.statuses[what] = self.statuses.get(what, 0) + 1

    @property
    def scrapes(self) -> int:
        return sum(self.statuses.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def scrape_once(port: int, timeout: float = 5.0) -> bytes:
    with socket.create_connection((LOCALHOST, port), timeout=timeout) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def start_ktop(checkout: Path, port: int, replay: str | None) -> subprocess.Popen:
    python = checkout / ".venv" / "bin" / "python"
    argv = [str(python if python.exists() else sys.executable), "-m", "ktop",
            "--serve", f"{LOCALHOST}:{port}"]
    if replay:
        argv[3:3] = ["--replay", replay]
    process = subprocess.Popen(argv, cwd=checkout, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            if b"\nktop_up 1" in scrape_once(port):
                return process
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"ktop --serve ended: {process.communicate()[1].strip()}")
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"ktop --serve had no page with ktop_up 1 in {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.2)


def _answer_end(received: bytearray) -> tuple[int, int] | None:
    """(status, length of the whole answer) once its head is in, else None."""
    end = received.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(received[:end]).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ")[1])
    length = 0
    for line in head[1:]:
        name, _, text = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(text)
    return status, end + 4 + length


def load(port: int, clients: int, seconds: float, period: float, timeout: float) -> Outcome:
    """The scrapers, one thread, non-blocking: every scrape due before `seconds` is
    finished (or timed out) before this returns."""
    outcome = Outcome()
    selector = selectors.DefaultSelector()
    started = time.monotonic()
    end = started + seconds
    fleet = [Client(due=started + period * i / clients) for i in range(clients)]
    due = [(client.due, i) for i, client in enumerate(fleet)]  # a heap of the idle ones
    in_flight: set[int] = set()

    def drop(client: Client) -> None:
        if client.sock is not None:
            try:
                selector.unregister(client.sock)
            except (KeyError, ValueError):
                pass
            client.sock.close()
        client.sock = None
        client.connecting = False

    def finish(i: int, what: str, now: float) -> None:
        client = fleet[i]
        outcome.count(what)
        if what == "200":
            outcome.latencies.append(now - client.sent_at)
        client.sent_at = 0.0
        client.received.clear()
        in_flight.discard(i)
        client.due = max(client.due + period, now)  # late: the next one now, as a scraper does
        if client.due < end:
            heapq.heappush(due, (client.due, i))

    def send(i: int, now: float) -> None:
        client = fleet[i]
        assert client.sock is not None
        try:
            client.sock.send(REQUEST)  # small: the socket takes it whole
        except OSError:
            drop(client)
            finish(i, "reset", now)
            return
        selector.modify(client.sock, selectors.EVENT_READ, i)

    checked = started
    while True:
        now = time.monotonic()
        if now >= end and not in_flight:
            break
        while due and due[0][0] <= now:
            _, i = heapq.heappop(due)
            client = fleet[i]
            client.sent_at = now  # a connect, if one is needed, counts in the scrape's time
            in_flight.add(i)
            if client.sock is not None:
                send(i, now)
                continue
            client.sock = socket.socket()
            client.sock.setblocking(False)
            client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if client.sock.connect_ex((LOCALHOST, port)) not in (0, errno.EINPROGRESS):
                drop(client)
                finish(i, "refused", now)
                continue
            client.connecting = True
            selector.register(client.sock, selectors.EVENT_WRITE, i)
        if now - checked > 0.1:
            checked = now
            for i in [i for i in in_flight if now - fleet[i].sent_at > timeout]:
                drop(fleet[i])
                finish(i, "timeout", now)
        wait = min(0.05, max(0.0, due[0][0] - now)) if due else 0.05
        for key, _mask in selector.select(wait):
            i = key.data
            client = fleet[i]
            now = time.monotonic()
            assert client.sock is not None
            if client.connecting:
                client.connecting = False
                if client.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    drop(client)
                    finish(i, "refused", now)
                else:
                    send(i, now)
                continue
            try:
                chunk: bytes | None = client.sock.recv(1 << 18)
            except OSError:
                chunk = None
            if not chunk:
                drop(client)
                if i not in in_flight:  # closed between scrapes: opened again at the next
                    outcome.reconnects += 1
                else:
                    finish(i, "reset" if chunk is None else "closed mid-answer", now)
                continue
            client.received += chunk
            answer = _answer_end(client.received)
            if answer is None or len(client.received) < answer[1]:
                continue
            status, length = answer
            if status == 200:
                outcome.page_bytes = max(outcome.page_bytes, length)
            else:  # 503 and the like close: a new connection for the next
                drop(client)
            finish(i, str(status), now)
    for client in fleet:
        drop(client)
    selector.close()
    return outcome


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def run(checkout: Path, args: argparse.Namespace) -> bool:
    port = free_port()
    process = start_ktop(checkout, port, args.replay)
    try:
        quiet_s = min(10.0, args.seconds)
        before = cpu_seconds(process.pid)
        time.sleep(quiet_s)
        quiet = (cpu_seconds(process.pid) - before) / quiet_s
        before, began = cpu_seconds(process.pid), time.monotonic()
        outcome = load(port, args.clients, args.seconds, args.period, args.timeout)
        loaded = (cpu_seconds(process.pid) - before) / (time.monotonic() - began)
        alive = process.poll() is None
    finally:
        process.terminate()
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
    answered = outcome.statuses.get("200", 0)
    others = ", ".join(f"{n} {what}" for what, n in sorted(outcome.statuses.items())
                       if what != "200") or "none other"
    ms = [x * 1000 for x in outcome.latencies]
    print(f"{checkout}: {args.clients} clients x {args.seconds:.0f} s every {args.period:g} s "
          f"({'replay' if args.replay else 'live'}, page {outcome.page_bytes / 1024:.0f} KiB)")
    print(f"  scrapes: {answered} of {outcome.scrapes} answered 200 ({others}); "
          f"{outcome.reconnects} connections closed by the server between scrapes")
    print(f"  latency: median {percentile(ms, 0.5):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms, "
          f"max {max(ms, default=float('nan')):.1f} ms")
    print(f"  ktop CPU: {loaded * 100:.1f}% under the load, {quiet * 100:.1f}% for "
          f"{quiet_s:.0f} s before it (serving: {(loaded - quiet) * 100:+.1f}%)")
    return alive and outcome.scrapes > 0 and answered == outcome.scrapes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--period", type=float, default=1.0, help="seconds between a client's scrapes")
    parser.add_argument("--timeout", type=float, default=10.0, help="a scrape's time limit")
    parser.add_argument("--replay", metavar="FILE", help="serve this recording's page, not live")
    parser.add_argument("--ktop", action="append", type=Path, metavar="PATH",
                        help="checkout(s) to run (default: this one)")
    args = parser.parse_args()
    if args.replay is None and os.geteuid() != 0:
        parser.error("live ktop needs root: run as root, or give --replay FILE")
    if args.replay:
        args.replay = str(Path(args.replay).resolve())
    good = [run(checkout.resolve(), args) for checkout in (args.ktop or [REPO])]
    return 0 if all(good) else 1


if __name__ == "__main__":
    sys.exit(main())
