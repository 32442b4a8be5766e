"""The Snapshot as JSON (the contract tests and other tools rely on), and back for replay."""

from __future__ import annotations

import json
from typing import Any

from ktop.model import (
    BlockProfile,
    CpuProfile,
    CpuTimes,
    DiskStats,
    HotFunction,
    IoProcess,
    IoRequest,
    LockAddress,
    LockCaller,
    LockProfile,
    LockStack,
    LockTask,
    ProcessRow,
    Snapshot,
    StackSample,
    UserFrame,
)
from ktop.stacktree import callers_tree
from ktop.text import printable


def _user_frames(frames: tuple[UserFrame, ...]) -> list[dict[str, str]]:
    return [{"symbol": f.symbol, "module": f.module} for f in frames]


def cpu_to_json(cpu: CpuProfile, include_idle: bool = False) -> dict[str, Any]:
    functions = [f for f in cpu.functions if include_idle or not f.idle]
    return {
        "window_s": round(cpu.window_s, 3),
        "cumulative": cpu.cumulative,
        "total_samples": cpu.total_samples,
        "expected_samples": cpu.expected_samples,
        "idle_samples": cpu.idle_samples,
        "kernel_samples": cpu.kernel_samples,
        "user_samples": cpu.user_samples,
        "times": {
            "user": round(cpu.times.user, 2),
            "kernel": round(cpu.times.kernel, 2),
            "idle": round(cpu.times.idle, 2),
            "steal": round(cpu.times.steal, 2),
        },
        "lost": dict(cpu.lost),
        "line_info": cpu.line_info,
        "functions": [
            {
                "symbol": f.symbol,
                "module": f.module,
                "samples": f.samples,
                "percent": round(f.percent, 3),
                "idle": f.idle,
                # percent in the tree is the share of this function's samples, as perf top -g
                "callers": callers_tree(f.symbol, cpu.stacks).to_json(f.samples),
            }
            for f in functions
        ],
        "stacks": [
            {
                "pid": s.pid,
                "comm": s.comm,
                "samples": s.samples,
                "frames": list(s.frames),
                "modules": list(s.modules),
                "sources": list(s.sources),
                "user_frames": _user_frames(s.user_frames),
                "truncated": s.truncated,
                "idle": s.idle,
            }
            for s in cpu.stacks
            if s.frames and (include_idle or not s.idle)
        ],
    }


def locks_to_json(locks: LockProfile) -> dict[str, Any]:
    return {
        "events": locks.events,
        "window_s": round(locks.window_s, 3),
        "lost": dict(locks.lost),
        "callers": [
            {
                "caller": c.caller,
                "type": c.type,
                "contended": c.contended,
                "total_wait_ns": c.total_wait_ns,
                "max_wait_ns": c.max_wait_ns,
                "min_wait_ns": c.min_wait_ns,
                "avg_wait_ns": c.avg_wait_ns,
                "hist_ns": [list(b) for b in c.hist_ns],
                "user_stacks": [
                    {"frames": _user_frames(frames), "contended": n, "total_wait_ns": w}
                    for frames, n, w in c.user_stacks
                ],
                "tasks": [
                    {"pid": p, "comm": comm, "contended": n, "total_wait_ns": w}
                    for p, comm, n, w in c.tasks
                ],
                "stacks": [
                    {
                        "frames": list(s.frames),
                        "contended": s.contended,
                        "total_wait_ns": s.total_wait_ns,
                        "max_wait_ns": s.max_wait_ns,
                    }
                    for s in c.stacks
                ],
            }
            for c in locks.callers
        ],
        "locks": [
            {
                "address": lock.address,
                "symbol": lock.symbol,
                "type": lock.type,
                "contended": lock.contended,
                "total_wait_ns": lock.total_wait_ns,
                "max_wait_ns": lock.max_wait_ns,
            }
            for lock in locks.locks
        ],
        "tasks": [
            {
                "pid": t.pid,
                "comm": t.comm,
                "contended": t.contended,
                "total_wait_ns": t.total_wait_ns,
                "max_wait_ns": t.max_wait_ns,
            }
            for t in locks.tasks
        ],
    }


def blockio_to_json(block: BlockProfile) -> dict[str, Any]:
    return {
        "window_s": round(block.window_s, 3),
        "lost": dict(block.lost),
        "disks": [
            {
                "disk": d.disk,
                "major": d.major,
                "minor": d.minor,
                "reads": d.reads,
                "writes": d.writes,
                "read_bytes": d.read_bytes,
                "write_bytes": d.write_bytes,
                "avg_lat_ms": round(d.avg_lat_ms, 4),
                "hist_us": [list(b) for b in d.hist_us],
            }
            for d in block.disks
        ],
        "processes": [
            {
                "pid": p.pid,
                "comm": p.comm,
                "disk": p.disk,
                "major": p.major,
                "minor": p.minor,
                "rw": p.rw,
                "requests": p.requests,
                "bytes": p.bytes,
                "avg_lat_ms": round(p.avg_lat_ms, 4),
                "avg_queue_ms": round(p.avg_queue_ms, 4),
                "hist_us": [list(b) for b in p.hist_us],
                "stacks": [{"frames": list(f), "requests": n} for f, n in p.stacks],
            }
            for p in block.processes
        ],
        "requests": [
            {
                "time_s": round(r.time_s, 6),
                "comm": r.comm,
                "pid": r.pid,
                "disk": r.disk,
                "rw": r.rw,
                "sector": r.sector,
                "bytes": r.bytes,
                "queue_ms": round(r.queue_ms, 4),
                "lat_ms": round(r.lat_ms, 4),
            }
            for r in block.requests
        ],
    }


def to_json(snapshot: Snapshot, include_idle: bool = False) -> dict[str, Any]:
    cpu = snapshot.cpu
    data: dict[str, Any] = {
        "ktop_version": snapshot.ktop_version,
        "kernel": snapshot.kernel,
        "hostname": snapshot.hostname,
        "taken_at": snapshot.taken_at,
        "duration_s": round(snapshot.duration_s, 3),
        "headers": snapshot.headers,
        "sample_hz": cpu.sample_hz if cpu else 0,
        "cpus": cpu.cpus if cpu else 0,
        "cpu": cpu_to_json(cpu, include_idle) if cpu else None,
        "processes": [
            {
                "pid": p.pid,
                "comm": p.comm,
                "user": p.user,
                "state": p.state,
                "cpu_percent": p.cpu_percent,
                "sys_percent": p.sys_percent,
                "threads": p.threads,
                "rss_bytes": p.rss_bytes,
                "cmdline": p.cmdline,
            }
            for p in snapshot.processes
        ],
        "locks": locks_to_json(snapshot.locks) if snapshot.locks else None,
        "blockio": blockio_to_json(snapshot.blockio) if snapshot.blockio else None,
        "unavailable": dict(snapshot.unavailable),
    }
    return data


# ---- back from JSON, for replaying recorded data ------------------------------------------


def _cpu_from_json(d: dict[str, Any], hz: int, cpus: int) -> CpuProfile:
    return CpuProfile(
        sample_hz=hz,
        cpus=cpus,
        window_s=d["window_s"],
        cumulative=d.get("cumulative", False),
        total_samples=d["total_samples"],
        idle_samples=d["idle_samples"],
        kernel_samples=d["kernel_samples"],
        user_samples=d["user_samples"],
        lost=d.get("lost", {}),
        functions=tuple(
            HotFunction(f["symbol"], f["module"], f["samples"], f["percent"], f.get("idle", False))
            for f in d["functions"]
        ),
        stacks=tuple(
            StackSample(
                pid=s["pid"],
                comm=s["comm"],
                samples=s["samples"],
                frames=tuple(s["frames"]),
                modules=tuple(s.get("modules", ())),
                sources=tuple(s.get("sources", ())),
                user_frames=tuple(UserFrame(u["symbol"], u["module"]) for u in s.get("user_frames", ())),
                truncated=s.get("truncated", False),
                idle=s.get("idle", False),
            )
            for s in d["stacks"]
        ),
        times=CpuTimes(**d.get("times", {})),
        line_info=d.get("line_info", ""),
    )


def _locks_from_json(d: dict[str, Any]) -> LockProfile:
    return LockProfile(
        events=d["events"],
        lost=d.get("lost", {}),
        window_s=d.get("window_s", 0.0),
        callers=tuple(
            LockCaller(
                caller=c["caller"],
                type=c["type"],
                contended=c["contended"],
                total_wait_ns=c["total_wait_ns"],
                max_wait_ns=c["max_wait_ns"],
                min_wait_ns=c["min_wait_ns"],
                hist_ns=tuple(tuple(b) for b in c.get("hist_ns", ())),
                user_stacks=tuple(
                    (
                        tuple(UserFrame(f["symbol"], f["module"]) for f in u["frames"]),
                        u["contended"],
                        u["total_wait_ns"],
                    )
                    for u in c.get("user_stacks", ())
                ),
                tasks=tuple(
                    (t["pid"], t["comm"], t["contended"], t["total_wait_ns"])
                    for t in c.get("tasks", ())
                ),
                stacks=tuple(
                    LockStack(
                        tuple(s["frames"]), s["contended"], s["total_wait_ns"], s.get("max_wait_ns", 0)
                    )
                    for s in c.get("stacks", ())
                ),
            )
            for c in d["callers"]
        ),
        locks=tuple(
            LockAddress(
                lock["address"],
                lock["symbol"],
                lock["type"],
                lock["contended"],
                lock["total_wait_ns"],
                lock.get("max_wait_ns", 0),
            )
            for lock in d["locks"]
        ),
        tasks=tuple(
            LockTask(t["pid"], t["comm"], t["contended"], t["total_wait_ns"], t.get("max_wait_ns", 0))
            for t in d["tasks"]
        ),
    )


def _blockio_from_json(d: dict[str, Any]) -> BlockProfile:
    return BlockProfile(
        lost=d.get("lost", {}),
        window_s=d.get("window_s", 0.0),
        disks=tuple(
            DiskStats(
                x["disk"], x["major"], x["minor"], x["reads"], x["writes"], x["read_bytes"],
                x["write_bytes"], x["avg_lat_ms"], tuple(tuple(b) for b in x.get("hist_us", ())),
            )
            for x in d["disks"]
        ),
        processes=tuple(
            IoProcess(
                pid=p["pid"], comm=p["comm"], disk=p["disk"], major=p.get("major", 0),
                minor=p.get("minor", 0), rw=p["rw"], requests=p["requests"], bytes=p["bytes"],
                avg_lat_ms=p["avg_lat_ms"], avg_queue_ms=p["avg_queue_ms"],
                stacks=tuple((tuple(s["frames"]), s["requests"]) for s in p.get("stacks", ())),
                hist_us=tuple(tuple(b) for b in p.get("hist_us", ())),
            )
            for p in d["processes"]
        ),
        requests=tuple(
            IoRequest(
                r["time_s"], r["comm"], r["pid"], r["disk"], r["rw"], r["sector"], r["bytes"],
                r["queue_ms"], r["lat_ms"],
            )
            for r in d["requests"]
        ),
    )


def from_json(d: dict[str, Any]) -> Snapshot:
    return Snapshot(
        ktop_version=d["ktop_version"],
        kernel=d["kernel"],
        hostname=d["hostname"],
        taken_at=d.get("taken_at", 0.0),
        duration_s=d["duration_s"],
        headers=d.get("headers", ""),
        cpu=_cpu_from_json(d["cpu"], d["sample_hz"], d["cpus"]) if d.get("cpu") else None,
        processes=tuple(
            ProcessRow(
                pid=p["pid"], comm=p["comm"], user=p["user"], state=p["state"],
                cpu_percent=p["cpu_percent"], sys_percent=p["sys_percent"], threads=p["threads"],
                rss_bytes=p["rss_bytes"], cmdline=p.get("cmdline", ""),
            )
            for p in d["processes"]
        ),
        locks=_locks_from_json(d["locks"]) if d.get("locks") else None,
        blockio=_blockio_from_json(d["blockio"]) if d.get("blockio") else None,
        unavailable=d.get("unavailable", {}),
    )


class RecordingError(Exception):
    """A file that cannot be replayed; str() is one line naming the problem and the fix."""


def read_recording(path: str) -> Snapshot:
    """The snapshot in a file written by `ktop --snapshot FILE.json`."""
    fix = "replay a file written by `ktop --snapshot FILE.json`"
    name = printable(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise RecordingError(f"cannot read {name}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordingError(f"{name} is not JSON ({e}): {fix}") from None
    try:
        return from_json(data)
    except KeyError as e:
        raise RecordingError(f"{name} is not a ktop snapshot (no {e} field): {fix}") from None
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        raise RecordingError(f"{name} is not a ktop snapshot ({e}): {fix}") from None
