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
