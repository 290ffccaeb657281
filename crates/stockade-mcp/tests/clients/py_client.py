"""Drives `stockade-mcp` with the official Python MCP client (package `mcp`, pinned in
ci-setup.sh). One scenario per run; every check is an assert, so a failure exits
non-zero with the reason. Output lines starting with `RESULT ` are JSON for the Rust
test that started this script.

    python py_client.py SCENARIO (--stdio BIN [ARGS...] | --http URL [--token T])
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

EXPECTED_TOOLS = [
    "run_code",
    "sandbox_create",
    "sandbox_exec",
    "sandbox_destroy",
    "sandbox_list",
    "session_exec",
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "glob",
    "grep",
    "terminal_open",
    "terminal_send",
    "terminal_close",
]


def emit(kind: str, value: Any) -> None:
    print("RESULT " + json.dumps({"kind": kind, "value": value}), flush=True)


def client(args: argparse.Namespace, token: str | None = None) -> Client:
    if args.stdio:
        env = {k: v for k, v in os.environ.items() if k.startswith(("STOCKADE_", "PATH", "HOME"))}
        params = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:], env=env)
        return Client(params, mode=args.mode)
    tok = token or args.token
    headers = {"Authorization": f"Bearer {tok}"} if tok else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0))
    return Client(streamable_http_client(args.http, http_client=http), mode=args.mode)


def structured(r: Any) -> dict[str, Any]:
    assert r.structured_content is not None, f"no structuredContent in {r}"
    return r.structured_content


def text_of(r: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in r.content)


async def call_ok(c: Client, name: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = await c.call_tool(name, args, **kw)
    assert not r.is_error, f"{name}({args}) failed: {text_of(r)}"
    return structured(r)


async def call_err(c: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    r = await c.call_tool(name, args)
    assert r.is_error, f"{name}({args}) should have failed, got {r}"
    err = structured(r)["error"]
    assert err["message"] and err["fix"], err
    assert "what to try" in text_of(r), text_of(r)
    return err


async def check_tools(c: Client) -> None:
    tools = (await c.list_tools()).tools
    names = [t.name for t in tools]
    assert names == EXPECTED_TOOLS, names
    for t in tools:
        s = t.input_schema
        assert s["type"] == "object" and s.get("additionalProperties") is False, (t.name, s)
        assert t.description and len(t.description) > 40, t.name
        for r in s.get("required", []):
            assert r in s["properties"], (t.name, r)
    rc = next(t for t in tools if t.name == "run_code")
    assert "python" in rc.input_schema["properties"]["language"]["enum"]
    assert rc.input_schema["required"] == ["language", "code"]
    assert rc.output_schema is not None and "exit_code" in rc.output_schema["properties"]


async def scenario_all(args: argparse.Namespace) -> None:
    """initialize, tools/list, every tool, resources, policy violation, bad argument."""
    async with client(args) as c:
        assert c.server_info is not None and c.server_info.name == "stockade"
        await check_tools(c)

        out = await call_ok(c, "run_code", {"language": "python", "code": "print(6*7)"})
        assert out["exit_code"] == 0 and out["stdout"] == "42\n", out
        assert out["timed_out"] is False and out["oom_killed"] is False and out["truncated"] is False
        out = await call_ok(c, "run_code", {"language": "sh", "code": "echo oops >&2; exit 3"})
        assert out["exit_code"] == 3 and out["stderr"] == "oops\n", out

        sb = await call_ok(c, "sandbox_create", {"memory": "256m"})
        sid = sb["sandbox_id"]
        out = await call_ok(c, "sandbox_exec", {"sandbox_id": sid, "command": "cat; echo $FOO", "stdin": "in\n", "env": {"FOO": "bar"}})
        assert out["stdout"] == "in\nbar\n", out
        await call_ok(c, "write_file", {"sandbox_id": sid, "path": "/tmp/proj/main.py", "content": "print('hello')\n"})
        r = await call_ok(c, "read_file", {"sandbox_id": sid, "path": "/tmp/proj/main.py"})
        assert r["content"] == "print('hello')\n", r
        r = await call_ok(c, "edit_file", {"sandbox_id": sid, "path": "/tmp/proj/main.py", "old_string": "hello", "new_string": "world"})
        assert r["replacements"] == 1, r
        out = await call_ok(c, "sandbox_exec", {"sandbox_id": sid, "command": "python3 main.py", "cwd": "/tmp/proj"})
        assert out["stdout"] == "world\n", out
        r = await call_ok(c, "list_dir", {"sandbox_id": sid, "path": "/tmp/proj"})
        assert [e["name"] for e in r["entries"]] == ["main.py"], r
        r = await call_ok(c, "glob", {"sandbox_id": sid, "pattern": "**/*.py", "root": "/tmp"})
        assert r["paths"] == ["proj/main.py"], r
        r = await call_ok(c, "grep", {"sandbox_id": sid, "pattern": "wor.d", "root": "/tmp"})
        assert len(r["matches"]) == 1 and r["matches"][0]["line_number"] == 1, r
        r = await call_ok(c, "sandbox_list", {})
        assert [s["sandbox_id"] for s in r["sandboxes"]] == [sid], r

        # A terminal: a shell kept between calls, its keys, Ctrl-C and size.
        t = await call_ok(c, "terminal_open", {"sandbox_id": sid, "rows": 30, "cols": 100, "wait": 10})
        tid = t["terminal_id"]
        assert t["exited"] is False and t["sandbox_id"] == sid, t
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "input": "cd /tmp/proj; stty size; echo dir-$((1+1))\n", "until": "dir-2"})
        assert t["found"] is True and "30 100" in t["output"], t
        assert "\x1b" not in t["output"] and "\r" not in t["output"], t
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "input": "pwd\n", "until": "/tmp/proj\n"})
        assert t["found"] is True, t
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "input": "sleep 60; echo slept-$((4+4))\n", "wait": 1})
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "input": "\u0003"})
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "input": "\necho after-$((3+4))\n", "until": "after-7"})
        assert t["found"] is True and "slept-8" not in t["output"], t
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "rows": 40, "cols": 120, "input": "stty size\n", "until": "40 120"})
        assert t["found"] is True, t
        # Typed lines go through the approval rules as sandbox_exec's commands do.
        err = await call_err(c, "terminal_send", {"terminal_id": tid, "input": "curl http://example.com\n"})
        assert err["rule"] == "no-curl", err
        t = await call_ok(c, "terminal_send", {"terminal_id": tid, "input": "exit 3\n", "wait": 10})
        for _ in range(20):
            if t["exited"]:
                break
            t = await call_ok(c, "terminal_send", {"terminal_id": tid, "wait": 1})
        assert t["exited"] is True and t["exit_code"] == 3, t
        err = await call_err(c, "terminal_send", {"terminal_id": tid, "input": "x"})
        assert err["code"] == "not_found", err
        t = await call_ok(c, "terminal_open", {"sandbox_id": sid, "command": "cat"})
        r = await call_ok(c, "terminal_close", {"terminal_id": t["terminal_id"]})
        assert r["closed"] is True, r
        err = await call_err(c, "terminal_open", {"sandbox_id": sid, "rows": 0})
        assert err["code"] == "invalid_arguments", err
        # Twelve opened at once: eight stand (the most a client may have), the rest
        # are refused, and closing them leaves room again.
        opened: list[Any] = []

        async def open_one() -> None:
            opened.append(await c.call_tool("terminal_open", {"sandbox_id": sid, "command": "cat"}))

        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(open_one)
        good = [structured(r)["terminal_id"] for r in opened if not r.is_error]
        refused = [structured(r)["error"]["code"] for r in opened if r.is_error]
        assert len(good) == 8 and refused == ["limit_exceeded"] * 4, (good, refused)
        for tid in good:
            await call_ok(c, "terminal_close", {"terminal_id": tid})
        t = await call_ok(c, "terminal_open", {"sandbox_id": sid, "command": "cat"})
        await call_ok(c, "terminal_close", {"terminal_id": t["terminal_id"]})

        # Resources: the sandbox's files.
        res = (await c.list_resources()).resources
        assert any(str(x.uri).startswith(f"sandbox://{sid}/") for x in res), res
        rr = await c.read_resource(f"sandbox://{sid}/tmp/proj/main.py")
        assert rr.contents[0].text == "print('world')\n", rr
        rr = await c.read_resource(f"sandbox://{sid}/tmp/proj")
        assert rr.contents[0].text == "main.py", rr
        templates = (await c.list_resource_templates()).resource_templates
        assert {t.uri_template for t in templates} == {"sandbox://{sandbox_id}/{path}", "session://{name}/{path}"}

        # A session keeps its workspace across calls (and sandboxes).
        session = f"mcp-test-{os.getpid()}"
        out = await call_ok(c, "session_exec", {"name": session, "command": "echo kept > note.txt && pwd"})
        assert out["stdout"] == "/work\n", out
        r = await call_ok(c, "read_file", {"session": session, "path": "note.txt"})
        assert r["content"] == "kept\n", r
        rr = await c.read_resource(f"session://{session}/note.txt")
        assert rr.contents[0].text == "kept\n", rr
        emit("session", session)

        # Policy violations name the rule and what to do.
        err = await call_err(c, "sandbox_create", {"network": "egress"})
        assert err["code"] == "policy_denied" and err["rule"] == "allow_network", err
        err = await call_err(c, "sandbox_create", {"memory": "64g"})
        assert err["rule"] == "max_memory" and "at most" in err["fix"], err
        err = await call_err(c, "sandbox_create", {"mounts": [{"host": "/etc", "target": "/mnt"}]})
        assert err["rule"] == "workspaces", err
        err = await call_err(c, "sandbox_create", {"image": "alpine:3"})
        assert err["rule"] == "images", err
        # The approval rules (policy file of the test) apply to every exec and write.
        err = await call_err(c, "sandbox_exec", {"sandbox_id": sid, "command": "curl http://example.com"})
        assert err["code"] == "policy_denied" and err["rule"] == "no-curl", err
        err = await call_err(c, "run_code", {"language": "sh", "code": "curl x"})
        assert err["rule"] == "no-curl", err
        err = await call_err(c, "write_file", {"sandbox_id": sid, "path": "/tmp/secrets/x", "content": "x"})
        assert err["rule"] == "no-secrets", err

        # Bad arguments (schema violations) are tool errors naming the field.
        err = await call_err(c, "run_code", {"lang": "python", "code": "1"})
        assert err["code"] == "invalid_arguments" and "lang" in err["message"], err
        err = await call_err(c, "run_code", {"language": "python"})
        assert "code" in err["message"], err
        err = await call_err(c, "sandbox_exec", {"sandbox_id": sid, "command": 5})
        assert err["code"] == "invalid_arguments", err
        err = await call_err(c, "run_code", {"language": "cobol", "code": "x"})
        assert err["rule"] == "languages", err
        err = await call_err(c, "sandbox_exec", {"sandbox_id": "sb-nope", "command": "true"})
        assert err["code"] == "not_found" and "sandbox_list" in err["fix"], err
        err = await call_err(c, "read_file", {"sandbox_id": sid, "path": "/tmp/missing"})
        assert err["code"] in ("not_found", "invalid_spec"), err

        r = await call_ok(c, "sandbox_destroy", {"sandbox_id": sid})
        assert r["destroyed"] is True
        r = await call_ok(c, "sandbox_list", {})
        assert r["sandboxes"] == [], r
        # One left alive: the server must destroy it when this client disconnects.
        sb = await call_ok(c, "sandbox_create", {})
        emit("left", sb["sandbox_id"])


async def scenario_progress_cancel(args: argparse.Namespace) -> None:
    """A long exec reports progress; cancelling it kills the command."""
    async with client(args) as c:
        sid = (await call_ok(c, "sandbox_create", {}))["sandbox_id"]
        seen: list[str] = []
        got = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message or "")
            if any("marker-started" in m for m in seen):
                got.set()

        async with anyio.create_task_group() as tg:

            async def long_call() -> None:
                await c.call_tool(
                    "sandbox_exec",
                    {"sandbox_id": sid, "command": "echo marker-started; exec sleep 300", "timeout": 600},
                    progress_callback=on_progress,
                )
                raise AssertionError("the call should have been cancelled")

            tg.start_soon(long_call)
            with anyio.fail_after(60):
                await got.wait()
            tg.cancel_scope.cancel()
        assert any("marker-started" in m for m in seen), seen
        # The command is gone (the kill is synchronous with the exec's end; allow the
        # server a moment to process the notification).
        probe = "import os\nprint(sum(1 for p in os.listdir('/proc') if p.isdigit() and b'sleep\\x00300' in open(f'/proc/{p}/cmdline','rb').read()))"
        count = None
        for _ in range(100):
            out = await call_ok(c, "sandbox_exec", {"sandbox_id": sid, "command": f"python3 -c \"{probe}\""})
            count = int(out["stdout"])
            if count == 0:
                break
            await anyio.sleep(0.1)
        assert count == 0, f"sleep still running after cancel: {count}"
        emit("progress_messages", len(seen))


async def scenario_left(args: argparse.Namespace) -> None:
    """Creates sandboxes and a session, prints their ids and waits to be killed."""
    async with client(args) as c:
        ids = [(await call_ok(c, "sandbox_create", {}))["sandbox_id"] for _ in range(2)]
        emit("ids", ids)
        await anyio.sleep(3600)


async def scenario_tenants(args: argparse.Namespace) -> None:
    """Two clients with different tokens do not see each other's sandboxes."""
    tokens = args.token.split(",")
    async with client(args, tokens[0]) as a, client(args, tokens[1]) as b:
        sa = (await call_ok(a, "sandbox_create", {}))["sandbox_id"]
        await call_ok(a, "write_file", {"sandbox_id": sa, "path": "/tmp/mine", "content": "a-secret"})
        assert [s["sandbox_id"] for s in (await call_ok(b, "sandbox_list", {}))["sandboxes"]] == []
        err = await call_err(b, "sandbox_exec", {"sandbox_id": sa, "command": "cat /tmp/mine"})
        assert err["code"] == "not_found", err
        err = await call_err(b, "read_file", {"sandbox_id": sa, "path": "/tmp/mine"})
        assert err["code"] == "not_found", err
        err = await call_err(b, "sandbox_destroy", {"sandbox_id": sa})
        assert err["code"] == "not_found", err
        try:
            await b.read_resource(f"sandbox://{sa}/tmp/mine")
            raise AssertionError("tenant b read tenant a's file")
        except Exception as e:  # noqa: BLE001 - an MCP error is the expected answer
            assert "a-secret" not in str(e)
        # Sessions of the same name are separate workspaces per token.
        name = f"shared-{os.getpid()}"
        await call_ok(a, "session_exec", {"name": name, "command": "echo from-a > who"})
        out = await call_ok(b, "session_exec", {"name": name, "command": "cat who 2>/dev/null || echo none"})
        assert out["stdout"] == "none\n", out
        assert (await call_ok(a, "sandbox_list", {}))["sandboxes"][0]["sandbox_id"] == sa
        emit("sessions", [name])


async def scenario_quota(args: argparse.Namespace) -> None:
    """Sessions of one token share its sandbox quota (8 by default): a token once
    held 3 per session, as many sessions as it liked."""
    token = args.token.split(",")[0]
    async with client(args, token) as a, client(args, token) as b:
        made = []
        for c, n in ((a, 5), (b, 3)):
            for _ in range(n):
                made.append((c, (await call_ok(c, "sandbox_create", {}))["sandbox_id"]))
        err = await call_err(b, "sandbox_create", {})
        assert err["code"] == "limit_exceeded", err
        assert "8 live" in err["message"], err
        c, sid = made.pop()
        await call_ok(c, "sandbox_destroy", {"sandbox_id": sid})
        made.append((b, (await call_ok(b, "sandbox_create", {}))["sandbox_id"]))
        for c, sid in made:
            await call_ok(c, "sandbox_destroy", {"sandbox_id": sid})
        emit("quota", [len(made)])


async def scenario_race(args: argparse.Namespace) -> None:
    """A burst of creates from 16 sessions of one token at once gets the token's quota
    (8) and no more. The quota is the daemon's, counted under its lock with the
    creations in flight; a count of the server's own, taken before each create ended,
    let a burst through."""
    token = args.token.split(",")[0]
    made: list[str] = []
    refused: list[dict[str, Any]] = []
    ready = anyio.Event()
    done = anyio.Event()
    entered = 0

    async def one() -> None:
        nonlocal entered
        async with client(args, token) as c:
            entered += 1
            if entered == 16:
                ready.set()
            await ready.wait()
            r = await c.call_tool("sandbox_create", {})
            if r.is_error:
                refused.append(structured(r)["error"])
            else:
                made.append(structured(r)["sandbox_id"])
            # Hold the session (its sandboxes live with it) until every call ended.
            if len(made) + len(refused) == 16:
                done.set()
            await done.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(16):
            tg.start_soon(one)
    assert all(e["code"] == "limit_exceeded" for e in refused), refused
    emit("race", [len(made), len(refused)])


async def scenario_transport(args: argparse.Namespace) -> None:
    """The HTTP transport answers as the spec and the official client expect: a body
    that is not JSON is a JSON-RPC parse error, and closing a session logs no failed
    termination (it was 202, which the client logs on every disconnect)."""
    import logging

    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as h:
        r = await h.post(args.http, content=b"{not json", headers=headers)
        assert r.status_code == 400, (r.status_code, r.text)
        body = r.json()
        assert body["error"]["code"] == -32700 and body["id"] is None, body
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.DEBUG)
    async with client(args) as c:
        await c.list_tools()
    failed = [m for m in seen if "termination failed" in m.lower()]
    assert not failed, failed
    emit("transport", ["ok"])


ATTACKS: list[tuple[str, str, str, str]] = [
    # (name, language, code, what the output must show: the escape failed)
    ("network", "python", "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3); print('ESCAPED')\nexcept OSError as e: print('blocked', e)", "blocked"),
    ("write-outside", "sh", "for p in /etc/x /usr/x /root/x /x; do echo hi > $p 2>/dev/null && echo ESCAPED $p; done; echo done", "done"),
    ("host-secrets", "sh", "cat /etc/shadow 2>/dev/null && echo ESCAPED; ls /root 2>/dev/null && echo ESCAPED; echo done", "done"),
    ("fork-bomb", "python", "import os\nn=0\ntry:\n    while True:\n        if os.fork()==0:\n            import time; time.sleep(30); os._exit(0)\n        n+=1\nexcept OSError: print('capped', n)", "capped"),
    ("memory", "python", "x = bytearray(2 << 30); print('ESCAPED')", ""),
    ("timeout", "sh", "sleep 100; echo ESCAPED", ""),
    ("output-flood", "python", "import sys\nfor _ in range(100000): sys.stdout.write('y' * 100 + '\\n')", ""),
]


async def scenario_attacks(args: argparse.Namespace) -> None:
    """The attack suite's escape attempts, each one run_code call; each must fail."""
    async with client(args) as c:
        for name, lang, code, needle in ATTACKS:
            timeout = 2 if name == "timeout" else 30
            out = await call_ok(c, "run_code", {"language": lang, "code": code, "timeout": timeout})
            assert "ESCAPED" not in out["stdout"], (name, out)
            if needle:
                assert needle in out["stdout"], (name, out)
            if name == "memory":
                assert out["oom_killed"] or out["exit_code"] != 0, (name, out)
            if name == "timeout":
                assert out["timed_out"], (name, out)
            if name == "output-flood":
                assert out["truncated"] and len(out["stdout"]) <= 256 << 10, (name, len(out["stdout"]))
            if name == "fork-bomb":
                assert int(out["stdout"].split()[1]) < 64, out
            emit("attack", name)


async def scenario_bench(args: argparse.Namespace) -> None:
    """Latency of run_code python print(1) and tools/list over this transport."""
    n = int(os.environ.get("BENCH_N", "100"))
    async with client(args) as c:
        await call_ok(c, "run_code", {"language": "python", "code": "print(1)"})
        runs: list[float] = []
        for _ in range(n):
            t = time.perf_counter()
            out = await call_ok(c, "run_code", {"language": "python", "code": "print(1)"})
            runs.append((time.perf_counter() - t) * 1000)
            assert out["stdout"] == "1\n"
        lists: list[float] = []
        for _ in range(n):
            t = time.perf_counter()
            await c.list_tools()
            lists.append((time.perf_counter() - t) * 1000)
    emit("run_code_ms", runs)
    emit("tools_list_ms", lists)


SCENARIOS = {
    "all": scenario_all,
    "progress-cancel": scenario_progress_cancel,
    "left": scenario_left,
    "tenants": scenario_tenants,
    "quota": scenario_quota,
    "race": scenario_race,
    "transport": scenario_transport,
    "attacks": scenario_attacks,
    "bench": scenario_bench,
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--http")
    p.add_argument("--token")
    p.add_argument("--mode", default="legacy", help="legacy (initialize) or auto (server/discover first)")
    p.add_argument("--stdio", nargs=argparse.REMAINDER)
    args = p.parse_args()
    assert bool(args.http) != bool(args.stdio), "give --http URL or --stdio BIN ARGS..."
    anyio.run(SCENARIOS[args.scenario], args)
    print(f"py_client: {args.scenario} ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
