package stockade

// The attack suite's core cases, through the Go SDK, as real attacks: each test
// fails when its attack succeeds.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAttackNetworkIsOff(t *testing.T) {
	c := client(t)
	sb := sandbox(t, c, Spec{Language: "python"})
	probe := `
import socket
for what, target in (("tcp", ("1.1.1.1", 53)), ("tcp", ("8.8.8.8", 443))):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(target); print("CONNECTED", target)
    except OSError as e:
        print("blocked", target, e)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(3)
try:
    u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("1.1.1.1", 53))
    print("ANSWERED", len(u.recv(512)))
except OSError as e:
    print("blocked udp", e)
try:
    print("RESOLVED", socket.getaddrinfo("example.com", 443))
except OSError as e:
    print("blocked dns", e)
`
	r, err := sb.RunCode(context.Background(), "python", probe, ExecOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Stdout)
	for _, breach := range []string{"CONNECTED", "ANSWERED", "RESOLVED"} {
		if strings.Contains(out, breach) {
			t.Errorf("the sandbox reached the network (%s):\n%s", breach, out)
		}
	}
	if strings.Count(out, "blocked") != 4 {
		t.Errorf("every probe must be blocked:\n%s%s", out, r.Stderr)
	}
	dev := string(run(t, sb, "cat /proc/net/dev").Stdout)
	var ifaces []string
	for _, l := range strings.Split(dev, "\n")[2:] {
		if name, _, ok := strings.Cut(l, ":"); ok {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("interfaces %v: only loopback may exist", ifaces)
	}
}

func TestAttackRootIsReadOnly(t *testing.T) {
	c := client(t)
	sb := sandbox(t, c, Spec{})
	for _, path := range []string{"/usr/pwned", "/usr/bin/pwned", "/etc/pwned", "/pwned", "/var/pwned"} {
		r := run(t, sb, "echo x > "+path)
		if r.ExitCode == 0 {
			t.Errorf("%s was writable", path)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s appeared on the host", path)
		}
	}
	if r := run(t, sb, "echo x > /tmp/ok && cat /tmp/ok"); string(r.Stdout) != "x\n" {
		t.Errorf("/tmp must be writable: %+v", r)
	}
}

func TestAttackMemoryBombIsKilledAtTheLimit(t *testing.T) {
	c := client(t)
	sb := sandbox(t, c, Spec{Memory: "64m", Language: "python"})
	r, err := sb.RunCode(context.Background(), "python", "x = []\nwhile True: x.append(bytearray(16 << 20))",
		ExecOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode == 0 || r.TimedOut {
		t.Fatalf("the bomb was not stopped: %+v", r)
	}
	if !r.OOMKilled && r.Signal != 9 && !strings.Contains(string(r.Stderr), "MemoryError") {
		t.Fatalf("the bomb ended otherwise than at the memory limit: exit %d signal %d stderr %q", r.ExitCode, r.Signal, r.Stderr)
	}
	if r := run(t, sb, "echo alive"); string(r.Stdout) != "alive\n" {
		t.Fatalf("the sandbox must survive its bomb: %+v", r)
	}
}

func TestAttackForkBombIsContained(t *testing.T) {
	c := client(t)
	sb := sandbox(t, c, Spec{Pids: 32})
	run(t, sb, "bomb() { bomb | bomb & }; bomb; sleep 2", ExecOptions{Timeout: 5 * time.Second})
	after := run(t, sb, "echo alive; ls -d /proc/[0-9]* | wc -l", ExecOptions{Timeout: 20 * time.Second})
	lines := strings.Split(strings.TrimSpace(string(after.Stdout)), "\n")
	if len(lines) != 2 || lines[0] != "alive" {
		t.Fatalf("the sandbox does not answer after the bomb: %q %q", after.Stdout, after.Stderr)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(lines[1])); n >= 10 {
		t.Fatalf("%d processes are left in the sandbox: the bomb outlived its exec", n)
	}
}

func TestAttackTimeoutKillsTheWholeTree(t *testing.T) {
	c := client(t)
	sb := sandbox(t, c, Spec{})
	// Children that try to escape their exec: backgrounded, double-forked, in a new
	// session, nohup'ed.
	r := run(t, sb, "sleep 501 & (sleep 502 &) ; setsid sleep 503 & nohup sleep 504 >/dev/null 2>&1 & sleep 600",
		ExecOptions{Timeout: time.Second})
	if !r.TimedOut {
		t.Fatalf("the deadline did not end the exec: %+v", r)
	}
	ps := string(run(t, sb, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done").Stdout)
	for _, s := range []string{"sleep 501", "sleep 502", "sleep 503", "sleep 504", "sleep 600"} {
		if strings.Contains(ps, s) {
			t.Errorf("%s survived the deadline:\n%s", s, ps)
		}
	}
	// And when the command exits by itself, what it left behind ends too.
	run(t, sb, "setsid sleep 505 & (sleep 506 &)")
	ps = string(run(t, sb, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done").Stdout)
	if strings.Contains(ps, "sleep 505") || strings.Contains(ps, "sleep 506") {
		t.Errorf("a child outlived its exec:\n%s", ps)
	}
}

func TestAttackPathTraversalInFileOpsStaysInside(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	// A host secret in a directory the sandbox was not given.
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := sandbox(t, c, Spec{})
	run(t, sb, "ln -s "+hostDir+" /tmp/hostlink; ln -s / /tmp/rootlink; ln -s "+secret+" /tmp/secretlink")
	for _, p := range []string{secret, "/tmp/../../.." + secret, "/tmp/hostlink/secret", "/tmp/secretlink", "../../../.." + secret} {
		data, err := sb.ReadFile(ctx, p)
		if err == nil && strings.Contains(string(data), "host secret") {
			t.Errorf("read %s reached the host's file", p)
		}
		if err == nil {
			t.Errorf("read %s: the file must not exist inside the sandbox, got %q", p, data)
		}
	}
	for _, p := range []string{"/tmp/secretlink", "/tmp/hostlink/secret", "/tmp/../.." + secret, "/tmp/rootlink/etc/pwned", "../../../etc/pwned"} {
		_ = sb.WriteFile(ctx, p, []byte("pwned"))
	}
	if got, _ := os.ReadFile(secret); string(got) != "host secret" {
		t.Fatalf("a write through the sandbox changed the host's file: %q", got)
	}
	if _, err := os.Stat("/etc/pwned"); err == nil {
		t.Fatal("/etc/pwned appeared on the host")
	}
	// An archive with entries leaving the destination is refused before any write.
	bad := tarball(t, [2]string{"ok.txt", "x"}, [2]string{"../../../../tmp/escaped.txt", "x"})
	err := sb.Upload(ctx, "/tmp/dest", bad)
	if err == nil {
		t.Fatal("an upload with a .. entry was accepted")
	}
	if !errors.Is(err, ErrDenied) && !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("upload with ..: %v", err)
	}
	if _, err := sb.Stat(ctx, "/tmp/escaped.txt"); err == nil {
		t.Error("the .. entry was written")
	}
	if _, err := sb.Stat(ctx, "/tmp/dest/ok.txt"); err == nil {
		t.Error("part of a refused archive was written")
	}
	// A download of a tree whose symlink leads out of it is refused whole on the host.
	run(t, sb, "mkdir -p /tmp/out && echo data > /tmp/out/f && ln -s ../../../etc /tmp/out/etc")
	dest := filepath.Join(t.TempDir(), "dl")
	if err := sb.DownloadTo(ctx, "/tmp/out", dest); !errors.Is(err, ErrDenied) {
		t.Errorf("download of a link leaving the destination: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dest, "etc")); err == nil {
		t.Error("the escaping link was unpacked on the host")
	}
}
