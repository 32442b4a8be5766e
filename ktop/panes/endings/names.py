"""Signal numbers, si_codes and signal_generate's results as people say them."""

from __future__ import annotations

import signal as _signal

_NAMES = {int(s): s.name for s in _signal.Signals if not s.name.startswith("SIG_")}
_NAMES.pop(int(_signal.SIGIOT), None) if hasattr(_signal, "SIGIOT") else None
_NAMES[6] = "SIGABRT"
_NAMES[29] = "SIGIO"
_NAMES[17] = "SIGCHLD"
SIGRTMIN, SIGRTMAX = 34, 64  # the kernel's (glibc keeps the first two or three for itself)

# enum trace_signal_result (include/trace/events/signal.h)
RESULTS = ("delivered", "ignored", "already pending", "overflow", "info lost")

# si_code (include/uapi/asm-generic/siginfo.h): generic ones, then per signal
_GENERIC = {0: "SI_USER", 0x80: "SI_KERNEL", -1: "SI_QUEUE", -2: "SI_TIMER", -3: "SI_MESGQ",
            -4: "SI_ASYNCIO", -5: "SI_SIGIO", -6: "SI_TKILL", -7: "SI_DETHREAD",
            -60: "SI_ASYNCNL"}
_BY_SIGNAL = {
    11: {1: "SEGV_MAPERR", 2: "SEGV_ACCERR", 3: "SEGV_BNDERR", 4: "SEGV_PKUERR"},
    7: {1: "BUS_ADRALN", 2: "BUS_ADRERR", 3: "BUS_OBJERR", 4: "BUS_MCEERR_AR",
        5: "BUS_MCEERR_AO"},
    4: {1: "ILL_ILLOPC", 2: "ILL_ILLOPN", 3: "ILL_ILLADR", 4: "ILL_ILLTRP", 5: "ILL_PRVOPC",
        6: "ILL_PRVREG", 7: "ILL_COPROC", 8: "ILL_BADSTK"},
    8: {1: "FPE_INTDIV", 2: "FPE_INTOVF", 3: "FPE_FLTDIV", 4: "FPE_FLTOVF", 5: "FPE_FLTUND",
        6: "FPE_FLTRES", 7: "FPE_FLTINV", 8: "FPE_FLTSUB"},
    17: {1: "CLD_EXITED", 2: "CLD_KILLED", 3: "CLD_DUMPED", 4: "CLD_TRAPPED",
         5: "CLD_STOPPED", 6: "CLD_CONTINUED"},
    5: {1: "TRAP_BRKPT", 2: "TRAP_TRACE", 3: "TRAP_BRANCH", 4: "TRAP_HWBKPT"},
}
# The signals that end a process unless handled (signal(7): Term and Core).
FATAL = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 14, 15, 24, 25, 26, 27, 31})


def signal_name(sig: int) -> str:
    if sig in _NAMES:
        return _NAMES[sig]
    if SIGRTMIN <= sig <= SIGRTMAX:
        return f"SIGRTMIN+{sig - SIGRTMIN}" if sig - SIGRTMIN <= 15 else f"SIGRTMAX-{SIGRTMAX - sig}"
    return f"signal {sig}"


def code_name(sig: int, code: int) -> str:
    if code > 0 and code != 0x80 and code in _BY_SIGNAL.get(sig, {}):
        return _BY_SIGNAL[sig][code]
    return _GENERIC.get(code, str(code))


def result_name(result: int) -> str:
    return RESULTS[result] if 0 <= result < len(RESULTS) else f"result {result}"


def how_ended(status: int) -> tuple[str, int, str]:
    """wait(2)'s status -> (how, exit code or -1, signal name or "")."""
    sig = status & 0x7F
    if sig == 0:
        code = (status >> 8) & 0xFF
        return f"exit {code}", code, ""
    name = signal_name(sig)
    return (f"{name} (core dumped)" if status & 0x80 else name), -1, name
