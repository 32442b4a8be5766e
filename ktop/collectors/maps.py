"""Reading BPF maps through bcc, the same way for every collector."""

from __future__ import annotations

from typing import Any


def drain_hash(table: Any) -> list:
    """Batch lookup-and-delete (one syscall per batch); per-key fallback on old kernels."""
    try:
        return list(table.items_lookup_and_delete_batch())
    except Exception:  # bcc raises bare Exception when the kernel lacks batch operations
        items = list(table.items())
        for key, _ in items:
            try:
                del table[key]
            except KeyError:
                pass
        return items


def read_stack(table: Any, stack_id: int) -> tuple[int, ...]:
    """A stack map entry's addresses, innermost first, up to the first empty slot.

    (bcc's own walker assumes 127 slots; some of our stack maps hold fewer.)"""
    addresses = []
    for address in table[table.Key(stack_id)].ip:
        if not address:
            break
        addresses.append(int(address))
    return tuple(addresses)


def clear_stack_map(table: Any) -> None:
    """Empty a stack map. bcc 0.26's StackTrace.clear() does nothing: delete key by key."""
    for key in list(table.keys()):
        try:
            del table[key]
        except KeyError:
            pass
