"""The terminal driver: Textual's Linux driver with an input thread that sleeps until a key.

Textual's input thread wakes ten times a second to look for input it was not told of and
for the end of the app: 0.13% of a CPU at idle here, which ktop, a tool that must cost
less than what it watches, cannot afford. This one waits in poll() until the terminal
has input, the app ends (a pipe says so), or an escape sequence it holds is due (the
parser's own timeout: a lone Esc is a key after a moment, not the start of a sequence).

End of input (a read of nothing, or EIO) means the terminal is gone: the thread stops reading
and the app leaves as on SIGHUP. A terminal that is not the controlling one (`su -c` starts a
new session) sends no SIGHUP when it closes, and poll() then says "readable" forever.
poll(), not Textual's select(): select() refuses a descriptor past 1024, which the wake pipe
gets on a machine whose perf events and kept /proc files fill the low ones.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

# How often the thread looks while the parser holds a partial sequence (Textual's figure).
PENDING_POLL_S = 0.1


class _WakingEvent(threading.Event):
    """The driver's exit event: setting it wakes the input thread's poll()."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self.wake_fd: int | None = wake_fd  # None once the driver closed it

    def set(self) -> None:
        super().set()
        if self.wake_fd is not None:
            try:
                os.write(self.wake_fd, b"x")
            except BlockingIOError:  # the pipe is full: already woken
                pass


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.exit_event = _WakingEvent(self._wake_write)

    def start_application_mode(self) -> None:
        """Textual starts application mode again at every SIGCONT, also one after a SIGSTOP it
        never saw (kill -STOP, a debugger), whose input thread still runs: two threads then
        read one terminal, and at exit the one joined could block in read() until a key
        (`q` took 30-80 s to quit at load 13). The running threads are stopped first."""
        if self._key_thread is not None and self._key_thread.is_alive():
            self.disable_input()
        if self._writer_thread is not None and self._writer_thread.is_alive():
            self._writer_thread.stop()  # its queue is forgotten: it would wait on it forever
        super().start_application_mode()

    def run_input_thread(self) -> None:
        """Textual's loop (linux_driver.py), waiting without a timeout while nothing is
        pending."""
        self._drain_wake_pipe()  # a wake from an earlier stop (suspend and resume)
        selector = selectors.PollSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def process(events, final: bool = False) -> bool:
            """Deliver the keys read; False once the terminal is gone."""
            for key, mask in events:
                if key.fd == self._wake_read or not mask & selectors.EVENT_READ:
                    continue
                try:
                    data = os.read(self.fileno, 1024 * 4)
                except OSError:  # EIO: the terminal was hung up
                    data = b""
                if not data:
                    return False
                text = decode(data, final=final)
                if text:
                    for event in parser.feed(text):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
            return True

        try:
            while not self.exit_event.is_set():
                pending = getattr(parser, "_timeout_time", 0) is not None
                if not process(selector.select(PENDING_POLL_S if pending else None)):
                    self._input_ended()
                    return
            selector.unregister(self.fileno)
            process(selector.select(0), final=True)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except Exception:  # a partial sequence at exit: nothing to deliver
                pass

    def _input_ended(self) -> None:
        """The terminal is gone: the app leaves as `q` does (its quit), on its own loop."""
        leave = getattr(self._app, "quit", self._app.exit)
        try:
            self._loop.call_soon_threadsafe(leave)
        except RuntimeError:  # the loop is closed: the app has left already
            pass

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_read, 64):
                pass
        except OSError:  # empty (EAGAIN)
            pass

    def close(self) -> None:
        super().close()
        self.exit_event.wake_fd = None  # its number may name another file from now on
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
