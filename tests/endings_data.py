"""Constructed endings data for the unit tests: a shell's kill -9, a NULL dereference."""

from __future__ import annotations

from ktop.panes.endings.model import Ending, EndingsProfile, SignalCount, SignalSent

T0 = 1767268245.25  # unix time

KILL = SignalSent(
    time=T0, signal="SIGKILL", sig=9, code="SI_USER", result="delivered", sender_pid=300,
    sender_tid=300, sender_comm="bash", target_pid=301, target_tid=301, target_comm="sleep",
    cgroup="/user.slice",
    kernel=("__send_signal_locked+0x1a", "do_send_sig_info+0x5c", "kill_pid_info_type+0x3e",
            "__x64_sys_kill+0x9b", "do_syscall_64+0x82", "entry_SYSCALL_64_after_hwframe+0x76"),
    user=("kill+0xb (libc.so.6)", "kill_builtin+0x22c (bash)"), oom=True)
SEGV = SignalSent(
    time=T0 + 1, signal="SIGSEGV", sig=11, code="SEGV_MAPERR", result="delivered",
    sender_pid=302, sender_tid=302, sender_comm="segv", target_pid=302, target_tid=302,
    target_comm="segv", cgroup="/user.slice",
    kernel=("force_sig_fault+0x3c", "__bad_area_nosemaphore+0x1a0", "exc_page_fault+0x7c",
            "asm_exc_page_fault+0x26"),
    user=("crash_here+0x8 (segv)", "main+0x1e (segv)"))


def endings_profile() -> EndingsProfile:
    """Every field set (none at a default)."""
    return EndingsProfile(
        lost={"signal_ring_full": 1},
        endings=(
            Ending(time=T0 + 1.5, pid=302, ppid=1, comm="segv", cgroup="/user.slice",
                   how="SIGSEGV (core dumped)", exit_code=-1, signal="SIGSEGV",
                   lifetime_s=0.25, cpu_s=0.125, killer_pid=302, killer_comm="segv",
                   killer=SEGV),
            Ending(time=T0 + 0.5, pid=301, ppid=300, comm="sleep", cgroup="/user.slice",
                   how="SIGKILL", exit_code=-1, signal="SIGKILL", lifetime_s=2.5, cpu_s=0.001,
                   killer_pid=300, killer_comm="bash", killer=KILL),
        ),
        signals=(SEGV, KILL),
        counts=(SignalCount("SIGKILL", 9, "delivered", 300, "bash", 301, "sleep",
                            "/user.slice", 1),
                SignalCount("SIGSEGV", 11, "delivered", 302, "segv", 302, "segv",
                            "/user.slice", 1)),
        exits=3, oom_kills=1, window_s=5.5)


def every_field_profile() -> EndingsProfile:
    """A profile with every field of every record set (the JSON contract's test)."""
    kill = Ending(time=T0 + 0.5, pid=301, ppid=300, comm="sleep", cgroup="/user.slice",
                  how="SIGKILL", exit_code=-1, signal="SIGKILL", lifetime_s=2.5, cpu_s=0.001,
                  killer_pid=300, killer_comm="bash", killer=KILL)
    return EndingsProfile(
        lost={"signal_ring_full": 1}, endings=(kill,), signals=(KILL,),
        counts=(SignalCount("SIGKILL", 9, "delivered", 300, "bash", 301, "sleep",
                            "/user.slice", 1),),
        exits=3, oom_kills=1, window_s=5.5)
