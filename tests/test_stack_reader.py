"""Reading stack map entries: each id read once, the addresses of all stacks shared."""

from __future__ import annotations

from types import SimpleNamespace

from ktop.collectors import maps


def fresh(*addresses: int) -> tuple[int, ...]:
    """A stack as a read from the kernel makes it: new int objects every time."""
    return tuple(int(str(a)) for a in addresses)


def reader_of(entries: dict[int, tuple[int, ...]], monkeypatch) -> maps.StackReader:
    reads = []

    def stack_addresses(table, stack_id):
        reads.append(stack_id)
        if stack_id not in entries:
            raise KeyError(stack_id)
        return fresh(*entries[stack_id])

    monkeypatch.setattr(maps, "stack_addresses", stack_addresses)
    reader = maps.StackReader()
    reader.reads = reads
    return reader


KERNEL = SimpleNamespace(fd=7, max_entries=16384)
CALLERS = (0xFFFFFFFF81A00010, 0xFFFFFFFF81B00020, 0xFFFFFFFF81C00030)


def test_stacks_share_the_addresses_they_have_in_common(monkeypatch):
    """At 4000 Hz the totals gain ~25 stacks a second, most a new leaf under known callers:
    each caller's address is one object in all of them, not 32 bytes more per stack."""
    reader = reader_of({1: (0xFFFFFFFF81000001, *CALLERS), 2: (0xFFFFFFFF81000009, *CALLERS)},
                       monkeypatch)
    first, second = reader.read(KERNEL, 1, kernel=True), reader.read(KERNEL, 2, kernel=True)
    assert first[1:] == second[1:] == CALLERS and first[0] != second[0]
    assert all(a is b for a, b in zip(first[1:], second[1:]))
    assert reader.read(KERNEL, 1, kernel=True) is first and reader.reads == [1, 2]  # once


def test_sharing_is_bounded_and_never_changes_a_stack(monkeypatch):
    monkeypatch.setattr(maps, "ADDRESSES_SHARED", 2)
    entries = {i: (0xFFFFFFFF81000000 + i, *CALLERS) for i in range(1, 6)}
    reader = reader_of(entries, monkeypatch)
    assert [reader.read(KERNEL, i, kernel=True) for i in entries] == list(entries.values())
    assert len(reader._shared._addresses) <= 2 + len(CALLERS) + 1
    assert reader.read(KERNEL, 99) == () and reader.missing == 1
    # User addresses differ in every new process (ASLR): read as they are, never kept.
    shared = dict(reader._shared._addresses)
    assert reader.read(SimpleNamespace(fd=8, max_entries=8192), 3) == entries[3]
    assert reader._shared._addresses == shared


def test_collectors_share_one_table_of_addresses(monkeypatch):
    """Two collectors' readers (the panes walk the same kernel paths) hold one int object
    per address between them, and the one table stays within its bound."""
    monkeypatch.setattr(maps, "_ADDRESSES", {})
    entries = {1: (0xFFFFFFFF81000001, *CALLERS)}
    first = reader_of(entries, monkeypatch).read(KERNEL, 1, kernel=True)
    second = reader_of(entries, monkeypatch).read(KERNEL, 1, kernel=True)
    assert first == second and all(a is b for a, b in zip(first, second))
    assert len(maps._ADDRESSES) == len(first)
    monkeypatch.setattr(maps, "ADDRESSES_SHARED", 8)
    wide = reader_of({i: (0xFFFFFFFF82000000 + i,) for i in range(100)}, monkeypatch)
    for i in range(100):
        wide.read(KERNEL, i, kernel=True)
        assert len(maps._ADDRESSES) <= 9
