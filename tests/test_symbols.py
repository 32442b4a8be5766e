"""Kernel symbolization from kallsyms text: what a stack frame is called in every pane."""

from __future__ import annotations

import os
import random

import pytest
from conftest import root_only

from ktop.symbolize import kernel
from ktop.symbolize.kernel import KERNEL_MODULE, IdleClassifier, Kallsyms


def test_address_inside_a_function_is_symbol_plus_offset(kallsyms, addr):
    frame = addr("chacha_permute") + 0xDA
    resolved = kallsyms.lookup(frame)
    assert (resolved.name, resolved.offset, resolved.module) == ("chacha_permute", 0xDA, KERNEL_MODULE)
    assert kallsyms.format(frame) == "chacha_permute+0xda"


def test_function_entry_is_offset_zero(kallsyms, addr):
    assert kallsyms.format(addr("chacha_block_generic")) == "chacha_block_generic+0x0"


def test_last_byte_before_the_next_symbol_still_names_the_function(kallsyms, addr):
    end = addr("__pfx_random_read_iter") - 1
    offset = end - addr("get_random_bytes_user")
    assert kallsyms.format(end) == f"get_random_bytes_user+{offset:#x}"


def test_module_symbols_carry_the_module_name(kallsyms, addr):
    ext4 = kallsyms.lookup(addr("ext4_buffered_write_iter") + 0x44)
    assert (ext4.name, ext4.module) == ("ext4_buffered_write_iter", "[ext4]")
    bpf = kallsyms.lookup(addr("bpf_prog_5bc11209b800a05c_on_cpu_sample") + 0x2C)
    assert bpf.module == "[bpf]"


def test_line_order_does_not_matter(kallsyms_text, addr):
    """/proc/kallsyms lists modules after the core kernel, not in address order."""
    lines = kallsyms_text.splitlines()
    random.Random(7).shuffle(lines)
    shuffled = Kallsyms.from_text("\n".join(lines))
    for name in ("chacha_permute", "ext4_da_write_begin", "do_syscall_64", "_raw_spin_trylock"):
        assert shuffled.format(addr(name) + 0x10) == f"{name}+0x10"


def test_address_after_etext_is_hex_not_a_wrong_name(kallsyms, addr):
    """Past the end of kernel text lies rodata: no function owns the address."""
    stray = addr("_etext") + 0x100
    assert kallsyms.lookup(stray) is None
    assert kallsyms.format(stray) == hex(stray)


def test_address_in_a_gap_far_from_any_symbol_is_hex(kallsyms, addr):
    """Between the core kernel's last symbol and the first module lies unmapped space."""
    gap = addr("ext4_file_write_iter") - 0x1000_0000
    assert kallsyms.lookup(gap) is None
    assert kallsyms.format(gap) == hex(gap)


def test_address_below_the_first_symbol_is_hex(kallsyms, addr):
    low = addr("_stext") - 0x40
    assert kallsyms.format(low) == hex(low)


def test_address_far_past_the_last_module_symbol_is_hex(kallsyms, addr):
    far = addr("ext4_da_write_begin") + 0x10_0000
    assert kallsyms.lookup(far) is None


# Regression: names starting with __end_/__stop_ were once taken for region end markers.
@pytest.mark.parametrize("function", ["__end_swap_bio_read", "__stop_tty"])
def test_functions_whose_names_look_like_end_markers_still_resolve(kallsyms, addr, function):
    assert kallsyms.format(addr(function) + 0x30) == f"{function}+0x30"


def test_range_of_lock_text_markers(kallsyms, addr):
    lo, hi = kallsyms.range_of("__lock_text_start", "__lock_text_end")
    assert (lo, hi) == (addr("__lock_text_start"), addr("__lock_text_end"))
    assert lo <= addr("_raw_spin_lock_irqsave") < hi
    assert lo <= addr("resilient_queued_spin_lock_slowpath") < hi
    assert not lo <= addr("__schedule") < hi
    assert not lo <= addr("__pfx___do_softirq") < hi


def test_range_of_missing_or_reversed_markers_is_none(kallsyms):
    assert kallsyms.range_of("__lock_text_end", "__lock_text_start") is None
    assert kallsyms.range_of("__nonexistent_start", "__lock_text_end") is None


def test_address_of_matches_whole_names_only():
    # Names are stored back to back in one string: "lock" occurs inside "spin_lock" and across
    # the boundary of "ab" + "lockx", and neither is the symbol "lock".
    kallsyms = Kallsyms([(0x100, "T", "spin_lock", KERNEL_MODULE), (0x200, "T", "ab", KERNEL_MODULE),
                         (0x300, "T", "lockx", KERNEL_MODULE)])
    assert kallsyms.address_of("lock") is None
    assert kallsyms.address_of("ablock") is None
    assert kallsyms.address_of("ab") == 0x200
    assert kallsyms.address_of("spin_lock") == 0x100
    kallsyms = Kallsyms([(0x500, "t", "lock", KERNEL_MODULE), (0x400, "T", "lock", "[m]")])
    assert kallsyms.address_of("lock") == 0x400  # the lowest of two
    assert kallsyms.lookup(0x401).module == "[m]"
    assert kallsyms.lookup(0x501).module == KERNEL_MODULE
    assert Kallsyms([]).address_of("") is None


def test_exact_names_a_global_lock_only_at_its_address(kallsyms, addr):
    assert kallsyms.exact(addr("tasklist_lock")) == "tasklist_lock"
    assert kallsyms.exact(addr("tasklist_lock") + 8) is None
    assert kallsyms.exact(addr("jiffies_lock")) == "jiffies_lock"


def test_hidden_addresses_are_detected():
    """kptr_restrict shows every address as zero: ktop must say so, not name everything."""
    hidden = Kallsyms.from_text(
        "0000000000000000 T _stext\n0000000000000000 T do_syscall_64\n"
        "0000000000000000 t ext4_file_write_iter\t[ext4]\n"
    )
    assert hidden.hidden
    assert hidden.format(0xFFFFFFFF81001000) == "0xffffffff81001000"


def test_malformed_lines_are_skipped(kallsyms_text, addr):
    noisy = "garbage\n\nzzzz T bad_address\nffffffff81000000\n" + kallsyms_text
    table = Kallsyms.from_text(noisy)
    assert table.format(addr("do_syscall_64") + 1) == "do_syscall_64+0x1"
    assert table.address_of("bad_address") is None


def test_idle_classifier(kallsyms, addr):
    idle = IdleClassifier(kallsyms)
    assert idle.is_idle(addr("pv_native_safe_halt") + 0xB)  # known idle function
    assert idle.is_idle(addr("default_idle") + 0x9)  # inside .cpuidle.text
    assert not idle.is_idle(addr("chacha_permute") + 0xDA)
    assert not idle.is_idle(addr("_raw_spin_lock_irqsave") + 0x20)


def test_idle_code_ranges_cover_the_idle_loop_and_not_what_interrupts_call():
    table = Kallsyms.from_text(
        "ffffffff81000100 T do_idle\n"
        "ffffffff81000300 T cpu_startup_entry\n"
        "ffffffff81000340 T schedule_idle\n"  # not idle code: the idle task switching
        "ffffffff81000400 T idle_cpu\n"  # the scheduler asks it from interrupts too
        "ffffffff81000480 T update_rq_clock\n"
        "ffffffff82000000 t pv_native_safe_halt\n"
        "ffffffff82000010 T __cpuidle_text_start\n"
        "ffffffff82000010 T default_idle\n"
        "ffffffff820000c0 T __cpuidle_text_end\n"
        "ffffffff820000d0 T __noinstr_text_end\n"
    )
    ranges = IdleClassifier(table).code_ranges()
    # do_idle up to the next symbol and cpu_startup_entry touch: one range; the halt and
    # the cpuidle section touch too.
    assert ranges == ((0xFFFFFFFF81000100, 0xFFFFFFFF81000340),
                      (0xFFFFFFFF82000000, 0xFFFFFFFF820000C0))
    assert not any(start <= 0xFFFFFFFF81000400 < end for start, end in ranges)


@root_only
def test_real_proc_kallsyms_resolves_a_syscall_entry():
    table = Kallsyms.load()
    assert not table.hidden and len(table) > 10_000
    entry = table.address_of("do_syscall_64")
    assert table.format(entry + 0x10) == "do_syscall_64+0x10"


@pytest.mark.parametrize("restrict, says, fix", [
    ("2", "hidden even from root (kernel.kptr_restrict=2)", "sysctl kernel.kptr_restrict=1"),
    ("1", "hidden from this process (no CAP_SYSLOG)", "sysctl kernel.kptr_restrict=0"),
])
def test_hidden_addresses_as_root_say_why_and_the_fix(tmp_path, monkeypatch, restrict, says,
                                                      fix):
    """At kptr_restrict=2 root sees zeros too: "run as root" was no fix to give root."""
    from ktop.engine import LiveSource, Options, Unavailable
    from ktop.symbolize import kernel

    sysctl = tmp_path / "kptr_restrict"
    sysctl.write_text(restrict + "\n")
    monkeypatch.setattr(kernel, "KPTR_RESTRICT", str(sysctl), raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(Kallsyms, "load", classmethod(
        lambda cls, path="": cls.from_text("0000000000000000 T _stext\n")))
    with pytest.raises(Unavailable) as error:
        LiveSource(Options(), []).kallsyms()
    assert says in str(error.value) and fix in str(error.value)
    assert "run as root" not in str(error.value)


def test_symbols_at_one_address_keep_the_order_read_across_runs():
    """Lines out of address order are merged by run; symbols sharing an address stay in the
    order read (the last one names the address), as a stable sort of every line did."""
    text = "\n".join([
        "ffffffff81000000 T first", "ffffffff81000100 T alias_a", "ffffffff81000200 T after",
        "ffffffffc0000000 t mod_fn [mod]", "ffffffff81000100 T alias_b",
        "ffffffff81000080 t between", "0000000000000000 T hidden", "not-hex T junk",
    ])
    kallsyms = Kallsyms.from_text(text)
    assert len(kallsyms) == 6
    assert kallsyms.format(0xFFFFFFFF81000104) == "alias_b+0x4"
    assert kallsyms.format(0xFFFFFFFF81000084) == "between+0x4"
    assert kallsyms.lookup(0xFFFFFFFFC0000004).module == "[mod]"
    assert [kallsyms._names[i] for i in range(6)] == [
        "first", "between", "alias_a", "alias_b", "after", "mod_fn"]


def test_named_addresses_are_bounded_and_hot_ones_keep_their_object(monkeypatch):
    """The addresses named are kept in two generations within RESOLVED_KEPT: a hot address
    keeps one Resolved (and one string) across any number of turns, a cold one is dropped."""
    monkeypatch.setattr(kernel, "RESOLVED_KEPT", 64)
    kallsyms = Kallsyms([(0xFFFFFFFF81000000 + 0x1000 * i, "T", f"fn{i}", KERNEL_MODULE)
                         for i in range(1000)])
    hot = kallsyms.lookup(0xFFFFFFFF81000010)
    for i in range(1, 1000):
        kallsyms.lookup(0xFFFFFFFF81000000 + 0x1000 * i + 8)
        assert len(kallsyms._resolved) + len(kallsyms._resolved_before) <= 64
        if i % 16 == 0:
            assert kallsyms.lookup(0xFFFFFFFF81000010) is hot
    assert str(kallsyms.lookup(0xFFFFFFFF81000010)) == "fn0+0x10"
    assert 0xFFFFFFFF81000008 + 0x1000 not in kallsyms._resolved  # cold: gone


def test_every_name_comes_back_whole_across_the_compressed_blocks():
    """Names are kept compressed a block at a time: a table spanning many blocks, read out
    of address order as /proc/kallsyms is (modules last), names each address exactly, and
    finds a marker and any other name by name."""
    rng = random.Random(7)
    names = [f"{rng.choice(['do_', '__x64_sys_', 'ext4_', ''])}fn_{i}_{'x' * rng.randrange(40)}"
             for i in range(20 * kernel.NAMES_PER_BLOCK + 5)]
    core = [f"{0xFFFFFFFF81000000 + i * 0x40:016x} T {name}" for i, name in enumerate(names)]
    modules = [f"{0xFFFFFFFFC0000000 + i * 0x40:016x} t mod_fn_{i}\t[ext4]" for i in range(70)]
    text = "\n".join([*modules[:35], *core, "ffffffff82000000 T __lock_text_start", *modules[35:]])
    table = Kallsyms.from_text(text)
    for i, name in enumerate(names):
        assert table.format(0xFFFFFFFF81000000 + i * 0x40 + 3) == f"{name}+0x3"
    assert table.format(0xFFFFFFFFC0000000 + 69 * 0x40) == "mod_fn_69+0x0"
    assert table.address_of("__lock_text_start") == 0xFFFFFFFF82000000
    assert table.address_of(names[-1]) == 0xFFFFFFFF81000000 + (len(names) - 1) * 0x40
    assert table.address_of("fn_1") is None  # a prefix of names, no name
