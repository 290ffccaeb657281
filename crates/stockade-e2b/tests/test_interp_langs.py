"""The code interpreter's JavaScript and bash contexts, through the unmodified
`e2b-code-interpreter` SDK: state kept across cells, streamed output, results and
errors, interrupts, and clear errors for languages or runtimes that are missing."""

import shutil
import time

import pytest
from e2b_code_interpreter import Sandbox


@pytest.fixture
def ci(server):
    s = Sandbox.create(timeout=120)
    yield s
    s.kill()


def test_bash_context_keeps_variables_functions_and_cwd(ci):
    ctx = ci.create_code_context(language="bash")
    assert ctx.language == "bash"
    r = ci.run_code("x=41; greet() { echo \"hi $1\"; }; mkdir -p d && cd d", context=ctx)
    assert r.error is None, r.error
    seen = []
    r = ci.run_code(
        "echo $((x + 1)); greet there; pwd; echo oops >&2; printf 'no newline'",
        context=ctx,
        on_stdout=lambda m: seen.append(m.line),
    )
    assert r.error is None, r.error
    assert "".join(r.logs.stdout) == "42\nhi there\n/home/user/d\nno newline", r.logs.stdout
    assert "".join(r.logs.stderr) == "oops\n", r.logs.stderr
    assert seen, "stdout was streamed to the callback"
    assert r.execution_count == 2
    # The exit status of the cell's last command: not 0 is an error; the state stays.
    r = ci.run_code("ls /no/such/dir", context=ctx)
    assert r.error is not None and r.error.name == "ExitStatusError", r
    assert "status 2" in r.error.value
    assert "No such file" in r.error.traceback
    r = ci.run_code("false", context=ctx)
    assert r.error is not None and "status 1" in r.error.value
    assert "".join(ci.run_code("echo $x; pwd", context=ctx).logs.stdout) == "41\n/home/user/d\n"
    # Per-call env vars apply to that cell only.
    r = ci.run_code("echo \"[$ONLY_NOW] [$x]\"", context=ctx, envs={"ONLY_NOW": "it's here", "x": "7"})
    assert "".join(r.logs.stdout) == "[it's here] [7]\n", r.logs.stdout
    assert "".join(ci.run_code("echo \"[$ONLY_NOW] [$x]\"", context=ctx).logs.stdout) == "[] [41]\n"
    # Contexts are separate shells.
    other = ci.create_code_context(language="bash")
    assert "".join(ci.run_code("echo \"[$x]\"", context=other).logs.stdout) == "[]\n"
    # `run_code(language="bash")` uses the language's default context.
    ci.run_code("y=5", language="bash")
    assert "".join(ci.run_code("echo $y", language="bash").logs.stdout) == "5\n"
    langs = {c.language for c in ci.list_code_contexts()}
    assert {"python", "bash"} <= langs, langs


def test_bash_exit_and_interrupt_start_a_fresh_shell(ci):
    ctx = ci.create_code_context(language="bash")
    ci.run_code("x=1", context=ctx)
    r = ci.run_code("exit 3", context=ctx)
    assert r.error is not None and r.error.name == "InterpreterExited", r
    assert "fresh shell" in r.error.value
    assert "".join(ci.run_code("echo \"[$x]\"", context=ctx).logs.stdout) == "[]\n"
    # A client timeout interrupts the cell; the next cell runs in a fresh shell.
    t = time.monotonic()
    with pytest.raises(Exception):
        ci.run_code("sleep 60", context=ctx, timeout=2)
    assert time.monotonic() - t < 20
    r = ci.run_code("echo alive", context=ctx)
    assert "".join(r.logs.stdout) == "alive\n", r


@pytest.mark.skipif(not shutil.which("node"), reason="the host rootfs has no node")
def test_javascript_context_keeps_state_and_returns_values(ci):
    r = ci.run_code("let n = 40; var obj = {a: [1, 2]}; console.log('hi', n); n + 2", language="js")
    assert r.error is None, r.error
    assert r.text == "42", r
    assert "".join(r.logs.stdout) == "hi 40\n", r.logs.stdout
    r = ci.run_code("n += 1; obj.a.push(n); obj", language="javascript")
    assert r.text == "{ a: [ 1, 2, 41 ] }", r.text
    assert r.results[0].json == {"a": [1, 2, 41]}
    r = ci.run_code("'a string'", language="js")
    assert r.text == "a string"
    r = ci.run_code("process.stdout.write('raw\\n'); console.error('err'); undefined", language="js")
    assert r.text is None and "".join(r.logs.stdout) == "raw\n" and "".join(r.logs.stderr) == "err\n", r
    # A promise is awaited.
    r = ci.run_code("new Promise(ok => setTimeout(() => ok(n * 2), 50))", language="js")
    assert r.text == "82", r
    # Errors: name, message, stack; the state survives them.
    r = ci.run_code("function f() { throw new TypeError('bad thing'); }\nf()", language="js")
    assert r.error is not None and r.error.name == "TypeError" and r.error.value == "bad thing", r
    assert "at f" in r.error.traceback
    r = ci.run_code("nope.x", language="js")
    assert r.error.name == "ReferenceError", r.error
    assert ci.run_code("require('path').join('a', String(n))", language="js").text == "a/41"
    # Per-call env vars, for that cell only.
    assert ci.run_code("process.env.ONLY_NOW", language="js", envs={"ONLY_NOW": "yes"}).text == "yes"
    assert ci.run_code("String(process.env.ONLY_NOW)", language="js").text == "undefined"
    # A client timeout interrupts an endless loop; the state stays.
    with pytest.raises(Exception):
        ci.run_code("while (true) {}", language="js", timeout=2)
    assert ci.run_code("n", language="js").text == "41"
    # A context of its own has its own globals.
    ctx = ci.create_code_context(language="javascript")
    assert ctx.language == "javascript"
    r = ci.run_code("typeof n", context=ctx)
    assert r.text == "undefined", r


@pytest.mark.skipif(not shutil.which("node"), reason="the host rootfs has no node")
def test_javascript_awaits_at_the_top_level_and_imports(ci):
    """As in Node's REPL: `await` at a cell's top level, its declarations kept for the
    next cells, and static `import` lines."""
    r = ci.run_code("const wait = (ms, v) => new Promise(ok => setTimeout(() => ok(v), ms));\n"
                    "const got = await wait(20, 21);\ngot * 2", language="js")
    assert r.error is None and r.text == "42", r
    assert ci.run_code("got + 1", language="js").text == "22"
    r = ci.run_code("import path from 'node:path'\nimport { join as j, sep } from 'path'\n"
                    "import * as os from 'os'\nimport 'util'\n"
                    "[path.basename('/a/b.txt'), j('x', 'y'), sep, typeof os.cpus].join(' ')", language="js")
    assert r.error is None and r.text == "b.txt x/y / function", r
    assert ci.run_code("typeof path.join", language="js").text == "function"
    # A rejected await is the cell's error; a later timer's error is not the next cell's.
    r = ci.run_code("await Promise.reject(new RangeError('nope'))", language="js")
    assert r.error is not None and r.error.name == "RangeError" and r.error.value == "nope", r
    assert "REPLServer" not in r.error.traceback, r.error.traceback
    ci.run_code("setTimeout(() => { throw new Error('later') }, 10); 1", language="js")
    r = ci.run_code("await wait(100, 'mine')", language="js")
    assert r.error is None and r.text == "mine", r
    # An await that never ends is interrupted by the client's timeout; the state stays.
    with pytest.raises(Exception):
        ci.run_code("await new Promise(() => {})", language="js", timeout=2)
    assert ci.run_code("got", language="js").text == "21"


def test_missing_runtime_and_unknown_languages_are_clear_errors(server):
    with Sandbox.create(timeout=60) as ci:
        with pytest.raises(Exception) as e:
            ci.create_code_context(language="cobol")
        assert "not served" in str(e.value) and "bash" in str(e.value), str(e.value)
        with pytest.raises(Exception) as e:
            ci.run_code("1", language="ts")
        assert "TypeScript" in str(e.value), str(e.value)
    # A sandbox whose PATH has no node or bash: the error names the runtime.
    with Sandbox.create(timeout=60, envs={"PATH": "/nonexistent"}) as ci:
        r = ci.run_code("1 + 1", language="js")
        assert r.error is not None and r.error.name == "InterpreterError", r
        assert "no `node`" in r.error.value, r.error.value
        r = ci.run_code("echo hi", language="bash")
        assert r.error is not None and "no `bash`" in r.error.value, r.error.value


def test_contexts_are_listed_defaults_first_in_the_order_made(ci):
    """Python's and JavaScript's default contexts exist from the start, as on E2B; the
    list keeps one order: the defaults, then the contexts in the order they were made."""
    first = [(c.id, c.language) for c in ci.list_code_contexts()]
    assert [lang for _, lang in first] == ["python", "javascript"], first
    made = [ci.create_code_context(language=lang).id for lang in ("bash", "python", "javascript")]
    for _ in range(3):
        assert [c.id for c in ci.list_code_contexts()] == [i for i, _ in first] + made
    # The JavaScript default is the one `language="javascript"` runs in.
    ci.run_code("globalThis.seen = 7", language="javascript")
    r = ci.run_code("seen * 6", context=ci.list_code_contexts()[1])
    assert r.text == "42", r


def test_a_sandbox_killed_during_a_cell_raises(server):
    """Killed under a running cell, run_code raises as on E2B (the answer is cut off)
    instead of returning an execution with an error."""
    import threading

    s = Sandbox.create(timeout=120)
    killer = threading.Timer(2.0, s.kill)
    killer.start()
    try:
        with pytest.raises(Exception) as e:
            s.run_code("import time\nprint('started', flush=True)\ntime.sleep(60)")
        assert "sb-" not in str(e.value), e.value
    finally:
        killer.join()
    assert not s.is_running()
