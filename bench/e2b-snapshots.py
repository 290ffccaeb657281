"""What E2B's snapshots of a sandbox's files cost, with the unmodified `e2b` SDK against
`stockade serve --e2b-listen`:

- `create_snapshot()` of a sandbox of the host-root template whose home holds 8 MiB
  (one file) and 200 small files, against `Sandbox.create` of that template to its
  first `commands.run`;
- `Sandbox.create(snapshot_id)` to its first `commands.run` (its home copied in),
  against the same create of the template itself;
- `create_snapshot()` of a sandbox of an image template (writable root) after root
  wrote 4 MiB under /opt: the agent's layer, its commit, the home; then a create from
  it at once (which finds its image flattening, or flattened).

    sudo STOCKADE_BIN=$CARGO_TARGET_DIR/debug/stockade \\
        /var/cache/stockade/venv-e2b/bin/python bench/e2b-snapshots.py [N]
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

row = bench.row
FILL = ("dd if=/dev/urandom of=~/blob bs=1M count=8 status=none && mkdir -p ~/many && "
        "for i in $(seq 200); do echo $i > ~/many/f$i; done")


def ms(t0):
    return (time.perf_counter() - t0) * 1000


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    binary = os.environ["STOCKADE_BIN"]
    import_base_image(binary)
    tmp = tempfile.mkdtemp(prefix="stockade-bench-snap-")
    bench.on_tmpfs(tmp)
    proc, url = bench.start_server(tmp, config_toml=f'[templates.debian]\nimage = "{BASE_IMAGE}"\n')
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=bench.KEY)
    from e2b import Sandbox

    def create_to_first(name=None):
        t0 = time.perf_counter()
        with (Sandbox.create(name) if name else Sandbox.create()) as sb:
            sb.commands.run("true")
            return ms(t0)

    try:
        base = [create_to_first() for _ in range(n)]
        takes, snaps = [], []
        with Sandbox.create() as sb:
            sb.commands.run(FILL)
            for _ in range(n):
                t0 = time.perf_counter()
                snaps.append(sb.create_snapshot().snapshot_id)
                takes.append(ms(t0))
        row("`create_snapshot()` of a host-root sandbox, home of 8 MiB + 200 files (freeze, copy, thaw)",
            takes, "`Sandbox.create()` to its first `commands.run`", base)
        starts = [create_to_first(s) for s in snaps]
        row("`Sandbox.create(snapshot_id)` to its first `commands.run` (the home copied in)",
            starts, "`Sandbox.create()` of the template itself", base)
        for s in snaps:
            Sandbox.delete_snapshot(s)
        image_base = [create_to_first("debian") for _ in range(n)]
        root_takes, root_starts = [], []
        with Sandbox.create("debian") as sb:
            for i in range(n):
                sb.commands.run(f"dd if=/dev/urandom of=/opt/w{i} bs=1M count=4 status=none", user="root",
                                cwd="/")
                t0 = time.perf_counter()
                snap = sb.create_snapshot().snapshot_id
                root_takes.append(ms(t0))
                root_starts.append(create_to_first(snap))
                Sandbox.delete_snapshot(snap)
                sb.commands.run(f"rm /opt/w{i}", user="root", cwd="/")
        row("`create_snapshot()` of an image sandbox after root wrote 4 MiB in /opt (layer, commit, home)",
            root_takes, "`Sandbox.create(\"debian\")` to its first `commands.run`", image_base)
        row("`Sandbox.create` of that snapshot right after, to its first `commands.run` (its image flattened)",
            root_starts, "`Sandbox.create(\"debian\")`", image_base)
    finally:
        proc.terminate()
        proc.wait()
        bench.cleanup(tmp)


if __name__ == "__main__":
    main()
