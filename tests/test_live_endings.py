"""The endings pane's collector and aggregator on the real kernel: a shell's kill -9 and a
NULL dereference, each named as the kernel sent it (root; about 10 s)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from ktop.panes.endings.aggregate import EndingsAggregator
from ktop.panes.endings.collector import EndingsCollector
from ktop.panes.endings.model import Ending, EndingsProfile
from ktop.symbolize.kernel import Kallsyms
from ktop.symbolize.user import UserSymbolizer

pytestmark = [
    pytest.mark.live,
    pytest.mark.machine,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to load BPF programs"),
]

NULL_DEREF = r"""
#include <stdio.h>
__attribute__((noinline)) int crash_here(volatile int *p) { return *p; }
int main(void) { setvbuf(stdout, NULL, _IONBF, 0); printf("ready\n");
                 return crash_here((volatile int *)0); }
"""


@pytest.fixture(scope="module")
def watched() -> Iterator[tuple[EndingsCollector, EndingsAggregator]]:
    collector = EndingsCollector()
    collector.start()
    symbolizer = UserSymbolizer()
    aggregator = EndingsAggregator(60.0, symbols=Kallsyms.load(),
                                   resolve_user=symbolizer.resolve)
    try:
        yield collector, aggregator
    finally:
        collector.close()


def profile_after(watched: tuple[EndingsCollector, EndingsAggregator]) -> EndingsProfile:
    collector, aggregator = watched
    collector.end_interval()
    aggregator.add(collector.drain())
    return aggregator.profile()


def ending_of(profile: EndingsProfile, pid: int) -> Ending:
    found = [e for e in profile.endings if e.pid == pid]
    assert found, f"no ending of {pid} among {[(e.pid, e.comm) for e in profile.endings]}"
    return found[0]


def functions(frames: tuple[str, ...]) -> list[str]:
    return [f.split("+", 1)[0].split(" ", 1)[0] for f in frames]


def test_a_shells_kill_9_names_the_shell_and_its_kill_syscall(watched):
    profile_after(watched)  # start from an empty stream
    shell = subprocess.Popen(["bash", "-c", "sleep 30 & echo $!; sleep 2; kill -9 $!; wait"],
                             stdout=subprocess.PIPE, text=True)
    victim = int(shell.stdout.readline())
    shell.wait(timeout=10)
    profile = profile_after(watched)

    ending = ending_of(profile, victim)
    assert ending.comm == "sleep" and ending.how == "SIGKILL" and ending.signal == "SIGKILL"
    assert (ending.killer_pid, ending.killer_comm) == (shell.pid, "bash")
    assert 1.8 < ending.lifetime_s < 4.0, ending.lifetime_s  # killed after 2 s
    sent = ending.killer
    assert sent is not None and sent.code == "SI_USER" and sent.result == "delivered"
    kernel = functions(sent.kernel)
    assert "__x64_sys_kill" in kernel, kernel
    assert {"kill_pid_info_type", "kill_pid_info", "kill_something_info"} & set(kernel), kernel
    assert kernel.index("__x64_sys_kill") > kernel.index("__send_signal_locked"), kernel
    # The signal view counts it: SIGKILL from bash to sleep, delivered.
    assert any((c.signal, c.sender_pid, c.target_pid, c.result, c.count)
               == ("SIGKILL", shell.pid, victim, "delivered", 1) for c in profile.counts)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_null_dereference_is_sigsegv_from_the_fault_path_naming_the_function(watched, tmp_path):
    source, program = tmp_path / "segv.c", tmp_path / "segv"
    source.write_text(NULL_DEREF)
    subprocess.run(["cc", "-O1", "-g", "-o", str(program), str(source)], check=True)
    profile_after(watched)
    process = subprocess.Popen([str(program)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    assert process.wait(timeout=10) == -11
    time.sleep(0.1)
    profile = profile_after(watched)

    ending = ending_of(profile, process.pid)
    assert ending.signal == "SIGSEGV" and ending.how.startswith("SIGSEGV")
    assert ending.killer_pid == process.pid  # its own fault
    sent = ending.killer
    assert sent is not None and sent.code == "SEGV_MAPERR"
    kernel = functions(sent.kernel)
    assert {"force_sig_fault", "force_sig_fault_to_task"} & set(kernel), kernel
    assert "asm_exc_page_fault" in kernel, kernel
    # The faulting instruction's function, named though the process is gone.
    assert sent.user and sent.user[0].startswith("crash_here+"), sent.user
    assert "(segv)" in sent.user[0]
