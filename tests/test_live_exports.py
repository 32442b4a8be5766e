"""Live: every export written from a `--snapshot FILE.json` is the export of the live run of
the same seconds (root, real BPF)."""

from __future__ import annotations

import gzip
import json
import sys
import time

import pytest
from conftest import live_source, root_only, running

from ktop.exports import ExportOptions, export
from ktop.exports.jsonfile import from_json

pytestmark = [pytest.mark.live, root_only]


def exports_of(snapshot) -> dict:
    formats = {f"folded {of}": export("folded", snapshot, ExportOptions(folded_of=of))
               for of in ("cpu", "locks", "io", "io-latency")}
    formats["pprof"] = gzip.decompress(export("pprof", snapshot))
    formats["prom"] = export("prom", snapshot)
    return formats


def test_exports_from_the_json_of_a_live_run_are_the_live_ones(tmp_path):
    # A spinner in user space only (no kernel frame under most of its samples), beside
    # kernel work and disk writes.
    with running([sys.executable, "-c", "while True: pass"]) as spinner, \
            running(["dd", "if=/dev/zero", f"of={tmp_path}/out", "bs=64k", "count=400",
                     "oflag=direct"]), live_source(interval_s=0.5, cumulative=True) as source:
        time.sleep(2.5)
        live = source.collect()
    user_only = sum(s.samples for s in live.cpu.stacks if s.pid == spinner.pid and not s.frames)
    assert user_only > 10
    replayed = from_json(json.loads(export("json", live)))
    assert sum(s.samples for s in replayed.cpu.stacks if s.pid == spinner.pid and not s.frames) \
        == user_only
    live_exports, replayed_exports = exports_of(live), exports_of(replayed)
    for name, content in live_exports.items():
        assert replayed_exports[name] == content, name
