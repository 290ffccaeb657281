"""What E2B's template build API costs, with the unmodified `e2b` SDK's `Template`
builder against `stockade serve --e2b-listen` (the Debian test image of
crates/stockade-image/ci-setup.sh as the base):

- `Template.build` of a small template (an ENV, a RUN, a COPY of a directory, a
  WORKDIR) from the base image, end to end (its sandbox, the steps, the layer, the
  image), against creating a sandbox of the base image and running one command;
- `Sandbox.create` of the built template to its first `commands.run`, against the
  same for a template of the base image itself (no layer added);
- the same with a start command and ready check (a server on a port).

    sudo STOCKADE_BIN=$CARGO_TARGET_DIR/debug/stockade \\
        /var/cache/stockade/venv-e2b/bin/python bench/e2b-templates.py [N]
"""

import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]
spec = importlib.util.spec_from_file_location("e2b_bench", here / "e2b.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
sys.path.insert(0, str(here.parent / "crates/stockade-e2b/tests"))
from conftest import BASE_IMAGE, import_base_image  # noqa: E402

SERVE = ("python3 -c \"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 8123)); s.listen(); "
         "time.sleep(3600)\"")
PORT_OPEN = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8123), 1)\""


row = bench.row


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    binary = os.environ["STOCKADE_BIN"]
    import_base_image(binary)
    tmp = tempfile.mkdtemp(prefix="stockade-bench-tpl-")
    bench.on_tmpfs(tmp)
    proc, url = bench.start_server(tmp, config_toml=f'[templates.debian]\nimage = "{BASE_IMAGE}"\n')
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=bench.KEY)
    from e2b import Sandbox, Template

    ctx = Path(tmp) / "ctx"
    (ctx / "app").mkdir(parents=True)
    for i in range(20):
        (ctx / "app" / f"f{i}.py").write_text(f"print({i})\n" * 50)
    script = "echo built > /opt/built && python3 -c \"print(6 * 7)\""
    try:
        def create_to_first(name):
            t0 = time.perf_counter()
            with Sandbox.create(name) as sb:
                sb.commands.run("true")
                return (time.perf_counter() - t0) * 1000

        base = [create_to_first("debian") for _ in range(n)]
        builds = []
        for i in range(n):
            t = (Template(file_context_path=str(ctx)).from_image(BASE_IMAGE).set_envs({"K": str(i)})
                 .run_cmd(script, user="root").copy("app", "/home/user/app/").set_workdir("/home/user/app"))
            t0 = time.perf_counter()
            Template.build(t, "bench-tpl")
            builds.append((time.perf_counter() - t0) * 1000)
        row("`Template.build` (ENV, RUN, COPY of 20 files, WORKDIR) from the base image, to ready",
            builds, "`Sandbox.create` of a template of the base image to its first `commands.run`", base)
        Template.build(Template().from_image(BASE_IMAGE).set_start_cmd(SERVE, PORT_OPEN), "bench-start")
        built = [create_to_first("bench-tpl") for _ in range(n)]
        started = [create_to_first("bench-start") for _ in range(n)]
        row("`Sandbox.create` of the built template to its first `commands.run` (its home seeded)",
            built, "a template of the base image itself", base)
        row("the same with a start command and ready check (a server on a port)", started,
            "a template of the base image itself", base)
    finally:
        proc.terminate()
        proc.wait()
        bench.cleanup(tmp)


if __name__ == "__main__":
    main()
