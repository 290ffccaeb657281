package stockade

// A program with nothing running: the package-level Create starts a per-user daemon
// on the default socket, as the caller (run here as an unprivileged user when the
// tests run as root, so the daemon is rootless and its socket is
// $XDG_RUNTIME_DIR/stockaded.sock), and a second program uses the same daemon.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const autostartHelperEnv = "STOCKADE_GO_AUTOSTART_HELPER"

// autostartHelper is the child program: it creates a sandbox from the environment
// alone and prints what happened as JSON.
func autostartHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	out := map[string]any{"socket": DefaultSocket()}
	defer func() { json.NewEncoder(os.Stdout).Encode(out) }()
	c, err := Default(ctx)
	if err != nil {
		out["connect_error"] = err.Error()
		return 0
	}
	if h, err := c.Health(ctx); err == nil {
		out["tenant"] = h.Tenant
	}
	sb, err := Create(ctx, Spec{})
	if err != nil {
		out["create_error"] = err.Error()
		return 0
	}
	defer sb.Close()
	r, err := sb.Exec(ctx, []string{"echo", "from a daemon started on demand"})
	if err != nil {
		out["exec_error"] = err.Error()
		return 0
	}
	out["stdout"] = string(r.Stdout)
	return 0
}

// peer is the pid and uid of the process listening on a unix socket.
func peer(sock string) (pid, uid int, err error) {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if credErr != nil {
		return 0, 0, credErr
	}
	return int(cred.Pid), int(cred.Uid), nil
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
}

func TestADaemonIsStartedOnDemand(t *testing.T) {
	needDaemon(t)
	uid, gid := os.Geteuid(), os.Getegid()
	delegated := uid != 0
	if uid == 0 {
		// An unprivileged user, so the daemon it starts is rootless: the one the
		// repository's test.sh sets up with `stockade setup rootless` when it exists
		// (sandboxes then run), else nobody (the daemon then refuses them, by name).
		uid, gid = 65534, 65534
		if u, err := user.Lookup("stockade-rl"); err == nil {
			matches, _ := filepath.Glob("/sys/fs/cgroup/*stockade-user-" + u.Uid)
			more, _ := filepath.Glob("/sys/fs/cgroup/*/stockade-user-" + u.Uid)
			if len(matches)+len(more) > 0 {
				uid, _ = strconv.Atoi(u.Uid)
				gid, _ = strconv.Atoi(u.Gid)
				delegated = true
			}
		}
	}
	dir, err := os.MkdirTemp("", "stockade-go-autostart-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	runtimeDir, home := filepath.Join(dir, "run"), filepath.Join(dir, "home")
	for _, d := range []string{runtimeDir, home} {
		os.Mkdir(d, 0o700)
		os.Chown(d, uid, gid)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sdk.test")
	copyFile(t, self, bin, 0o755)
	sock := filepath.Join(runtimeDir, "stockaded.sock")
	t.Cleanup(func() {
		if pid, _, err := peer(sock); err == nil {
			syscall.Kill(pid, syscall.SIGTERM)
			for i := 0; i < 600 && processAlive(pid); i++ {
				time.Sleep(50 * time.Millisecond)
			}
			if processAlive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	helper := func() map[string]any {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "XDG_RUNTIME_DIR=" + runtimeDir,
			"STOCKADE_HOME=" + filepath.Join(home, "stockade"), "STOCKADE_CLI=" + daemon.cli, autostartHelperEnv + "=1"}
		if uid != os.Geteuid() {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		}
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("the helper failed: %v %s", err, b)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("the helper printed %q: %v", b, err)
		}
		return out
	}
	// A socket left by a daemon that died: nothing answers there, so a new one starts.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	os.Lchown(sock, uid, gid)
	first := helper()
	if first["socket"] != sock {
		t.Fatalf("the default socket of uid %d is %v, not %s", uid, first["socket"], sock)
	}
	if e, ok := first["connect_error"]; ok {
		t.Fatalf("no daemon was started on demand: %v (log: %s)", e, tail(sock+".log"))
	}
	pid, peerUID, err := peer(sock)
	if err != nil {
		t.Fatalf("nothing listens on %s: %v", sock, err)
	}
	if peerUID != uid {
		t.Fatalf("the daemon runs as uid %d, not as its caller (%d)", peerUID, uid)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); len(args) < 2 || args[1] != "serve" {
		t.Fatalf("the process on the socket is %q, not `stockade serve`", args)
	}
	t.Logf("uid %d started `stockade serve` (pid %d) on %s", uid, pid, sock)
	switch {
	case first["stdout"] == "from a daemon started on demand\n":
	case !delegated && first["create_error"] != nil:
		// Rootless sandboxes need a delegated cgroup (`stockade setup rootless`); the
		// daemon answered with its own refusal, which names the fix.
		msg := fmt.Sprint(first["create_error"])
		if !strings.Contains(msg, "setup rootless") && !strings.Contains(msg, "fix:") {
			t.Fatalf("the rootless daemon refused without a fix: %s", msg)
		}
		t.Logf("the rootless daemon answered, and refused the sandbox: %s", msg)
	default:
		t.Fatalf("the sandbox did not run: %v", first)
	}
	// A second program finds the running daemon and starts none.
	second := helper()
	if _, ok := second["connect_error"]; ok {
		t.Fatalf("the second program: %v", second)
	}
	if pid2, _, err := peer(sock); err != nil || pid2 != pid {
		t.Fatalf("the second program started another daemon (%d, was %d): %v", pid2, pid, err)
	}
}
