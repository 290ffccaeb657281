"""E2B's template build API with the unmodified SDK's `Template` builder: builds run
in a sandbox on an image of Stockade's store, and their result starts new sandboxes."""

import pytest
from e2b import BuildException, Sandbox, SandboxException, Template

from conftest import KEY_B

PORT_OPEN = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8123), 1)\""
# A server on 8123 (python3-minimal has no http.server).
SERVE = ("python3 -c \"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 8123)); s.listen(); "
         "time.sleep(3600)\"")


def test_a_template_built_with_the_sdk_starts_sandboxes_as_built(base_image, tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('from app')\n")
    (tmp_path / "app" / ".hidden").write_text("h")
    (tmp_path / "req.txt").write_text("x==1\n")
    t = (
        Template(file_context_path=str(tmp_path))
        .from_image(base_image)
        .set_envs({"GREETING": "hi there"})
        .run_cmd("echo built > /etc/built-by-template && rm /etc/debian_version && rm -r /usr/share/doc",
                 user="root")
        .copy("app", "/home/user/app/")
        .copy("req.txt", "/opt/req.txt", user="root", mode=0o640)
        .set_workdir("/home/user/app")
        .run_cmd("python3 -c \"open('made.txt', 'w').write('made')\"")
        .set_start_cmd(SERVE, PORT_OPEN)
    )
    logs = []
    info = Template.build(t, "tpl-app", on_build_logs=logs.append)
    assert info.name == "tpl-app" and info.template_id and info.build_id
    messages = [str(getattr(e, "message", e)) for e in logs]
    assert any("[2/6] RUN" in m for m in messages), messages
    assert any("Template is ready" in m for m in messages), messages
    assert Template.exists("tpl-app")
    assert not Template.exists("tpl-app", api_key=KEY_B), "another tenant sees nothing of it"
    with Sandbox.create("tpl-app") as sb:
        r = sb.commands.run("cat /etc/built-by-template; echo $GREETING; pwd; cat made.txt; python3 main.py; "
                            "cat .hidden; echo; stat -c %a:%u /opt/req.txt; stat -c %u made.txt; "
                            "test -e /etc/debian_version || echo version-gone; test -e /usr/share/doc || echo doc-gone")
        assert r.stdout.split("\n") == [
            "built", "hi there", "/home/user/app", "made" + "from app", "h", "640:0", "1000",
            "version-gone", "doc-gone", ""], r.stdout
        # The start command runs, ready before the create answered.
        assert sb.commands.run(PORT_OPEN).exit_code == 0
        assert Sandbox.get_info(sb.sandbox_id).template_id == "tpl-app"
        # What the sandbox writes is its own: the template is untouched.
        # A template's image root is writable, as an E2B sandbox's is: for this
        # sandbox only.
        sb.commands.run("echo x > /etc/built-by-template && rm -r /home/user/app", user="root", cwd="/")
        assert sb.commands.run("cat /etc/built-by-template", cwd="/").stdout == "x\n"
    with Sandbox.create("tpl-app:default") as sb:
        assert sb.files.read("/home/user/app/main.py") == "print('from app')\n"
        assert sb.commands.run("cat /etc/built-by-template").stdout == "built\n"
    # The base image's own template (no /home/user in it) starts too.
    with Sandbox.create("debian") as sb:
        assert sb.commands.run("pwd; test -e /etc/built-by-template || echo clean").stdout == "/home/user\nclean\n"
    with pytest.raises(SandboxException) as e:
        Sandbox.create("tpl-app", api_key=KEY_B)
    assert "not found" in str(e.value)


def test_a_template_builds_on_another_and_a_rebuild_replaces_it(base_image):
    first = Template().from_image(base_image).run_cmd("echo one > /opt/layer1", user="root")
    one = Template.build(first, "tpl-first")
    second = Template().from_template("tpl-first").run_cmd("echo two > /opt/layer2", user="root")
    Template.build(second, "tpl-second")
    with Sandbox.create("tpl-second") as sb:
        assert sb.commands.run("cat /opt/layer1 /opt/layer2").stdout == "one\ntwo\n"
    again = Template().from_image(base_image).run_cmd("echo again > /opt/layer1", user="root")
    info = Template.build(again, "tpl-first")
    assert info.template_id == one.template_id, "the same name keeps its id"
    with Sandbox.create("tpl-first") as sb:
        assert sb.commands.run("cat /opt/layer1").stdout == "again\n"
    # The template built on the replaced one keeps what it was built on.
    with Sandbox.create("tpl-second") as sb:
        assert sb.commands.run("cat /opt/layer1 /opt/layer2").stdout == "one\ntwo\n"


def test_a_failing_build_says_which_step_and_why(base_image):
    t = Template().from_image(base_image).run_cmd("echo about to fail; exit 3")
    with pytest.raises(BuildException) as e:
        Template.build(t, "tpl-fails")
    assert "step 1" in str(e.value) and "status 3" in str(e.value), e.value
    assert not Template.exists("tpl-fails")
    t = Template().from_image("no-such/image:1").run_cmd("true")
    with pytest.raises(BuildException) as e:
        Template.build(t, "tpl-no-image")
    assert "not in Stockade's image store" in str(e.value) and "stockade image" in str(e.value), e.value
    t = Template().from_image(base_image).set_user("nobody").run_cmd("true")
    with pytest.raises(BuildException) as e:
        Template.build(t, "tpl-bad-user")
    assert '"user"' in str(e.value) and '"root"' in str(e.value), e.value
    # A start command that ends fails the build at once, with its last words.
    t = Template().from_image(base_image).set_start_cmd("echo cannot serve; exit 1", PORT_OPEN)
    with pytest.raises(BuildException) as e:
        Template.build(t, "tpl-start-fails")
    assert "ended before the ready command" in str(e.value) and "cannot serve" in str(e.value), e.value


def test_the_servers_own_templates_cannot_be_built_over(base_image):
    with pytest.raises(Exception) as e:
        Template.build(Template().from_image(base_image).run_cmd("true"), "base")
    assert "server's own" in str(e.value), e.value


def test_a_builds_code_cannot_hand_the_host_a_file_of_its_own_as_the_layer(base_image):
    # The start command (root of the sandbox) keeps pointing the layer's path at a
    # host secret: the build fails, and nothing of the host file is read.
    swap = "while :; do ln -sfn /etc/shadow /.e2b-build/out/layer.tar; done"
    t = Template().from_image(base_image).set_user("root").set_start_cmd(swap, "true")
    with pytest.raises(BuildException) as e:
        Template.build(t, "tpl-swap")
    assert "changes" in str(e.value), e.value
    with open("/etc/shadow") as f:
        first = f.readline().strip()
    assert first not in str(e.value)
    assert not Template.exists("tpl-swap")


def test_another_tenants_builds_are_not_found_and_a_template_is_deleted(server, base_image):
    import json
    import urllib.error
    import urllib.request

    from conftest import KEY_A

    def call(method, path, key, body=None):
        req = urllib.request.Request(server + path, method=method, data=body,
                                     headers={"X-API-KEY": key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    status, body = call("POST", "/v3/templates", KEY_A, json.dumps({"name": "tpl-private"}).encode())
    assert status == 202, body
    made = json.loads(body)
    tid, bid = made["templateID"], made["buildID"]
    h = "ab" * 32
    for method, path in [("GET", f"/templates/{tid}/files/{h}"),
                         ("GET", f"/templates/{tid}/builds/{bid}/status"),
                         ("POST", f"/v2/templates/{tid}/builds/{bid}")]:
        status, body = call(method, path, KEY_B, b"{}")
        assert status == 404, (method, path, status, body)
    # The upload URL is one-use and names its tenant's hash only.
    status, body = call("GET", f"/templates/{tid}/files/{h}", KEY_A)
    assert status == 201, body
    url = json.loads(body)["url"]
    put = urllib.request.Request(url, method="PUT", data=b"x")
    with urllib.request.urlopen(put) as r:
        assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, method="PUT", data=b"y"))
    assert e.value.code == 403
    # Deleting: not another tenant's; one's own, after which it is gone.
    Template.build(Template().from_image(base_image).run_cmd("true"), "tpl-delete-me")
    tid = json.loads(call("GET", "/templates/aliases/tpl-delete-me", KEY_A)[1])["templateID"]
    assert call("DELETE", f"/templates/{tid}", KEY_B)[0] == 404
    assert Template.exists("tpl-delete-me")
    assert call("DELETE", f"/templates/{tid}", KEY_A)[0] == 204
    assert not Template.exists("tpl-delete-me")
    with pytest.raises(SandboxException):
        Sandbox.create("tpl-delete-me")
    # Bad names and hashes are refused by name.
    status, body = call("POST", "/v3/templates", KEY_A, json.dumps({"name": "ns/Bad Name"}).encode())
    assert status == 400 and b"namespace" in body, body
    status, body = call("GET", f"/templates/{tid}/files/../../etc", KEY_A)
    assert status in (400, 404), body


def test_a_templates_last_user_is_who_commands_run_as_by_default(base_image):
    Template.build(Template().from_image(base_image).set_user("root").run_cmd("id -u > /opt/built-as"),
                   "tpl-root")
    with Sandbox.create("tpl-root") as sb:
        assert sb.commands.run("cat /opt/built-as; id -u").stdout == "0\n0\n"
        assert sb.commands.run("id -u", user="user").stdout == "1000\n"
        # Files too: a write that names no user is root's; "user" is the sandbox user.
        sb.files.write("/opt/by-default.txt", "r")
        assert sb.commands.run("stat -c %u /opt/by-default.txt").stdout == "0\n"
        with pytest.raises(Exception):
            sb.files.write("/opt/by-user.txt", "u", user="user")
