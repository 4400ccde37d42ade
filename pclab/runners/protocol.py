"""What the lab's processes say to each other, as types with one encode and one decode each.

    server (warm_pool)  --LaunchRequest-->          zygote
    zygote              --RankAssignment-->         a spare rank (over its job pipe)
    zygote              --RanksStarted, RanksExited--> server
    rank                --RankOutput (rank<r>.json)--> launcher

Every message is one line of JSON. `decode` raises ValueError for anything malformed, so a
garbled line is a failed launch with a reason, never a KeyError deep in the launcher.

    python -c "from pclab.runners.protocol import *; print(RanksExited((0, 1)).encode())"
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

READY = "ready"  # the zygote's first line: its imports are done


def _object(line: str | bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        raise ValueError(f"{what}: not JSON: {line[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what}: not a JSON object: {line[:80]!r}")
    return value


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise ValueError(f"{what}: expected a list of integers, got {value!r}")
    return tuple(value)


def _field(message: dict[str, Any], name: str, kind: type, what: str) -> Any:
    value = message.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise ValueError(f"{what}: {name}={value!r} is not a {kind.__name__}")
    return value


@dataclass(frozen=True)
class LaunchRequest:
    """Start `world_size` ranks of `worker` with `args`, logging under `log_dir`, in `env`."""

    worker: str
    world_size: int
    args: tuple[str, ...]
    log_dir: str
    env: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "world_size": self.world_size,
            "args": list(self.args),
            "log_dir": self.log_dir,
            "env": dict(self.env),
        }

    def encode(self) -> bytes:
        return (json.dumps(self.to_json()) + "\n").encode()

    @classmethod
    def from_json(cls, message: dict[str, Any]) -> LaunchRequest:
        what = "launch request"
        args, env = message.get("args"), message.get("env")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{what}: args={args!r} is not a list of strings")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError(f"{what}: env is not a mapping of strings")
        return cls(
            worker=_field(message, "worker", str, what),
            world_size=_field(message, "world_size", int, what),
            args=tuple(args),
            log_dir=_field(message, "log_dir", str, what),
            env=env,
        )

    @classmethod
    def decode(cls, line: str | bytes) -> LaunchRequest:
        return cls.from_json(_object(line, "launch request"))


@dataclass(frozen=True)
class RankAssignment:
    """A spare rank's part in a launch: which rank it is, and the store's port."""

    request: LaunchRequest
    rank: int
    port: int

    def encode(self) -> bytes:
        body = {"request": self.request.to_json(), "rank": self.rank, "port": self.port}
        return (json.dumps(body) + "\n").encode()

    @classmethod
    def decode(cls, line: str | bytes) -> RankAssignment:
        what = "rank assignment"
        message = _object(line, what)
        request = message.get("request")
        if not isinstance(request, dict):
            raise ValueError(f"{what}: no request")
        return cls(
            request=LaunchRequest.from_json(request),
            rank=_field(message, "rank", int, what),
            port=_field(message, "port", int, what),
        )


@dataclass(frozen=True)
class RanksStarted:
    """The zygote's first reply to a launch: every rank's pid and the store's."""

    pids: tuple[int, ...]
    store: int

    def encode(self) -> str:
        return json.dumps({"pids": list(self.pids), "store": self.store})


@dataclass(frozen=True)
class RanksExited:
    """The zygote's last reply: each rank's exit code (negative: killed by that signal)."""

    codes: tuple[int, ...]

    def encode(self) -> str:
        return json.dumps({"exit": list(self.codes)})


def decode_reply(line: str | bytes) -> RanksStarted | RanksExited:
    """One line of the zygote's replies."""
    message = _object(line, "zygote reply")
    if "exit" in message:
        return RanksExited(_ints(message["exit"], "zygote reply"))
    if "pids" in message:
        store = _field(message, "store", int, "zygote reply")
        return RanksStarted(_ints(message["pids"], "zygote reply"), store)
    raise ValueError(f"zygote reply: neither pids nor exit codes: {line[:80]!r}")


def payload_sha256(payload: dict[str, Any]) -> str:
    """sha256 of a payload's canonical JSON (sorted keys, no spaces): what a rank signs."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class RankOutput:
    """What one rank reports: its JSON payload, signed with its sha256."""

    rank: int
    payload: dict[str, Any]

    def encode(self) -> str:
        body = {k: v for k, v in self.payload.items() if k != "sha256"}
        return json.dumps(dict(body, sha256=payload_sha256(body)), sort_keys=True)

    @classmethod
    def decode(cls, text: str, rank: int) -> RankOutput:
        """The signed payload (the "sha256" kept); ValueError naming the rank otherwise."""
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"rank {rank}: unreadable output ({exc})") from None
        if not isinstance(payload, dict):
            raise ValueError(f"rank {rank}: output is not a JSON object")
        body = {k: v for k, v in payload.items() if k != "sha256"}
        if payload.get("sha256") != payload_sha256(body):
            raise ValueError(f"rank {rank}: output checksum mismatch")
        return cls(rank, payload)
