"""Keyword arguments of ``create`` -> the JSON sandbox spec the Rust core validates.

Only shape is checked here; the core validates values and lists every problem at
once (an ``InvalidSpecError``). Every default is the secure one: no network,
read-only root, 64 MiB ``/tmp``, 64 pids, 512 MiB, one CPU, 300 s, seccomp and
landlock on, uid 1000.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .errors import InvalidSpecError

WORKSPACE = "/work"
"""Where ``workspace=`` is mounted (and the working directory)."""


@dataclass(frozen=True)
class Mount:
    """A host path mounted into the sandbox, read-only unless ``writable``."""

    host: str
    target: str
    writable: bool = False

    @classmethod
    def parse(cls, value: MountLike) -> Mount:
        if isinstance(value, Mount):
            return value
        if isinstance(value, str):
            parts = value.split(":")
            if len(parts) == 2:
                return cls(parts[0], parts[1])
            if len(parts) == 3 and parts[2] in ("ro", "rw"):
                return cls(parts[0], parts[1], parts[2] == "rw")
            raise InvalidSpecError(f"mount {value!r} is not HOST:PATH[:rw]")
        if isinstance(value, Sequence) and len(value) in (2, 3):
            return cls(str(value[0]), str(value[1]), bool(value[2]) if len(value) == 3 else False)
        raise InvalidSpecError(f"mount {value!r} is not a Mount, 'HOST:PATH[:rw]' or (host, target[, writable])")


MountLike = Union[Mount, str, Sequence[Any]]
Size = Union[int, str]


def _mapping(name: str, value: Mapping[str, str] | None) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSpecError(f"{name} must be a mapping of strings, not {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}


def _number_problems(**values: Any) -> list[str]:
    """Type problems of the numeric options, all of them (the core checks ranges)."""
    problems = []
    for name, v in values.items():
        if name in ("memory", "tmp_size"):
            if isinstance(v, bool) or not isinstance(v, (int, str)) or (isinstance(v, str) and not v[:1].isdigit()):
                problems.append(f"{name}={v!r} is not a size (bytes as an int, or a string like '512m')")
        elif name == "cpus":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                problems.append(f"cpus={v!r} is not a number")
        elif v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            problems.append(f"{name}={v!r} is not an integer")
    return problems


NetworkLike = Union[bool, str, Sequence[str], Mapping[str, Any]]


def network_value(network: NetworkLike) -> Any:
    """The spec's ``network``: ``False``/``"none"`` (default), ``True``/``"all"`` (the
    public internet), a list of allow entries (``["pypi.org", "10.1.2.0/24:5432"]``),
    or ``{"allow": [...], "deny": [...], "credentials": [...]}``. A credential is
    ``{"host": "api.openai.com", "value": "Bearer sk-...", "header": "Authorization",
    "env": "OPENAI_API_KEY"}``: the egress proxy sets the header on HTTPS requests to
    the host and the sandbox sees only a placeholder in ``env``. The core checks
    every entry."""
    if isinstance(network, bool):
        return "egress" if network else "none"
    if isinstance(network, str):
        if network in ("none", "egress", "all"):
            return network
        raise InvalidSpecError(
            f"network={network!r} is not 'none' or 'all'; an allowlist is a list: network=[{network!r}]"
        )
    if isinstance(network, Mapping):
        unknown = set(network) - {"allow", "deny", "credentials"}
        if unknown:
            raise InvalidSpecError(
                f"network policy has unknown keys {sorted(unknown)}; use 'allow', 'deny' and 'credentials'"
            )
        policy: dict[str, Any] = {"allow": list(network.get("allow", [])), "deny": list(network.get("deny", []))}
        creds = list(network.get("credentials", []))
        for i, c in enumerate(creds):
            if not isinstance(c, Mapping) or "host" not in c or "value" not in c:
                raise InvalidSpecError(
                    f"network credentials[{i}] must be a mapping with 'host' and 'value' "
                    "(and optional 'header', 'env')"
                )
            extra = set(c) - {"host", "value", "header", "env"}
            if extra:
                raise InvalidSpecError(f"network credentials[{i}] has unknown keys {sorted(extra)}")
        if creds:
            policy["credentials"] = [dict(c) for c in creds]
        return policy
    entries = list(network)
    bad = [e for e in entries if not isinstance(e, str)]
    if bad:
        raise InvalidSpecError(f"network entries must be strings, not {bad!r}")
    return entries


def build_spec(
    *,
    image: str | None = None,
    network: NetworkLike = False,
    writable: bool = False,
    timeout_secs: int = 300,
    memory: Size = "512m",
    cpus: float = 1.0,
    pids: int = 64,
    tmp_size: Size = "64m",
    env: Mapping[str, str] | None = None,
    mounts: Sequence[MountLike] | None = None,
    workspace: str | os.PathLike[str] | tuple[str | os.PathLike[str], bool] | None = None,
    workdir: str | None = None,
    user: tuple[int, int] | int | None = None,
    hostname: str | None = None,
    seccomp: bool = True,
    landlock: bool = True,
    idle_timeout_secs: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The spec as a dict (see ``create`` for the meaning of each argument)."""
    problems = _number_problems(
        memory=memory, tmp_size=tmp_size, cpus=cpus, pids=pids,
        timeout_secs=timeout_secs, idle_timeout_secs=idle_timeout_secs,
    )
    if problems:
        raise InvalidSpecError("invalid sandbox options: " + "; ".join(problems))
    spec_mounts = [Mount.parse(m) for m in (mounts or [])]
    if workspace is not None:
        path, rw = workspace if isinstance(workspace, tuple) else (workspace, False)
        spec_mounts.append(Mount(os.path.abspath(os.fspath(path)), WORKSPACE, bool(rw)))
        workdir = workdir or WORKSPACE
    spec: dict[str, Any] = {
        "image": image,
        "network": network_value(network),
        "writable": bool(writable),
        "timeout_secs": timeout_secs,
        "idle_timeout_secs": idle_timeout_secs,
        "limits": {"memory_bytes": memory, "cpus": cpus, "pids": pids, "tmp_bytes": tmp_size},
        "env": _mapping("env", env),
        "mounts": [{"host": m.host, "target": m.target, "writable": m.writable} for m in spec_mounts],
        "workdir": workdir,
        "hardening": {"seccomp": bool(seccomp), "landlock": bool(landlock)},
        "labels": _mapping("labels", labels),
    }
    if user is not None:
        uid, gid = user if isinstance(user, tuple) else (user, user)
        spec["user"] = {"uid": uid, "gid": gid}
    if hostname is not None:
        spec["hostname"] = hostname
    return spec


def spec_json(spec: dict[str, Any]) -> str:
    try:
        return json.dumps(spec)
    except (TypeError, ValueError) as e:
        raise InvalidSpecError(f"sandbox spec: {e}") from None
