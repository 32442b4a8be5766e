"""Totals since start outlive the processes they count: fold the exited ones by command.

A shell loop starts thousands of processes a minute; keyed by pid, the cumulative totals
grew by 28 MiB a minute under such churn. Once a table of totals holds FOLD_AFTER entries,
the entries of processes that have exited fold into one per command, and it grows only with
what is new: a new command, a new stack. Every count is kept; only what can no longer mean
anything goes: the pid of a process that is gone, and user addresses that were never named.
Below that size nothing folds, nor in the first ten seconds (engine.FOLD_EVERY), so a
--snapshot of a few seconds keeps every pid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ktop.model import EXITED_PID, UserFrame
from ktop.symbolize.user import UNKNOWN

# Entries in one table of totals before its exited processes fold (bench/RESULTS.md: Memory).
FOLD_AFTER = 500

K = TypeVar("K")
V = TypeVar("V")


def rekey(
    table: dict[K, V],
    new_key: Callable[[K], K],
    merge: Callable[[V, V], V],
    only: Callable[[K], bool] = lambda key: True,
) -> None:
    """Move, in place, the entries `only` selects to `new_key(key)`, merging collisions."""
    for key in [k for k in table if only(k)]:
        moved = new_key(key)
        if moved == key:
            continue
        value = table.pop(key)
        table[moved] = merge(table[moved], value) if moved in table else value


def fold_exited(
    table: dict[K, V],
    is_alive: Callable[[int], bool],
    pid_of: Callable[[K], int],
    with_pid: Callable[[K, int], K],
    merge: Callable[[V, V], V],
) -> None:
    """Re-key the entries of exited pids to EXITED_PID, merging their values."""
    rekey(table, lambda key: with_pid(key, EXITED_PID), merge,
          only=lambda key: pid_of(key) > 0 and not is_alive(pid_of(key)))


def crowded(*tables: dict) -> bool:
    """Time to fold: the tables that show the same processes fold together, or a process
    would read `exited` in one view and by its pid in another."""
    return any(len(table) >= FOLD_AFTER for table in tables)


def forget_addresses(frames: tuple[UserFrame, ...]) -> tuple[UserFrame, ...]:
    """User frames as the totals keep them. An address that was never named (its process
    exited first) is unique to that process (ASLR) and can never be named now: one
    [unknown] frame stands for each run of them."""
    kept: list[UserFrame] = []
    for frame in frames:
        if frame.module == UNKNOWN and frame.symbol.startswith("0x"):
            frame = UserFrame(UNKNOWN, UNKNOWN)
            if kept and kept[-1] == frame:
                continue
        kept.append(frame)
    return tuple(kept)
