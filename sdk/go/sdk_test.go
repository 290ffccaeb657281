package stockade

// The API against the test daemon: lifecycle, exec (streamed, stdin, timeout,
// background), run_code, files, sessions, pause and resume, snapshots, errors,
// context cancellation and the tools.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCreateExecInspectListDestroy(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{Env: map[string]string{"GREETING": "hi"}})
	r, err := sb.Exec(ctx, []string{"/bin/sh", "-c", "echo $GREETING; id -u; hostname; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 3 || string(r.Stdout) != "hi\n1000\nsandbox\n" || r.OK() || r.TimedOut {
		t.Fatalf("%+v %q", r, r.Stdout)
	}
	info := sb.Info()
	if info.ID != sb.ID() || info.Provider != "native" || info.State != "running" || len(info.Applied) == 0 ||
		!info.ExpiresAt.After(info.CreatedAt) || info.OwnerPID != os.Getpid() {
		t.Errorf("info %+v", info)
	}
	seccomp := false
	for _, w := range info.Applied {
		seccomp = seccomp || (w.Kind == "seccomp" && w.Enforced && w.Detail != "")
	}
	if !seccomp {
		t.Errorf("no enforced seccomp wall in %v", info.Applied)
	}
	var spec map[string]any
	if err := json.Unmarshal(info.Spec, &spec); err != nil || spec["network"] != "none" {
		t.Errorf("spec %s (%v)", info.Spec, err)
	}
	list, err := c.List(ctx)
	if err != nil || !slices.ContainsFunc(list, func(i Info) bool { return i.ID == sb.ID() }) {
		t.Fatalf("list %v %v", list, err)
	}
	now, err := sb.Inspect(ctx)
	if err != nil || now.State != "running" {
		t.Fatalf("inspect %+v %v", now, err)
	}
	same, err := c.Attach(ctx, sb.ID())
	if err != nil || same.ID() != sb.ID() {
		t.Fatalf("attach %v", err)
	}
	if r, err := same.Exec(ctx, []string{"true"}); err != nil || !r.OK() {
		t.Fatalf("exec through the attached handle: %v %v", r, err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("a second destroy must be a no-op: %v", err)
	}
	if _, err := c.Attach(ctx, sb.ID()); !errors.Is(err, ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("attach after destroy: %v", err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("exec after destroy: %v", err)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Version == "" || !slices.Contains(h.Providers, "native") {
		t.Fatalf("health %+v %v", h, err)
	}
	// A detached sandbox has no owner; gc reaps what expired, never a live sandbox.
	kept := sandbox(t, c, Spec{Detach: true})
	if kept.Info().OwnerPID != 0 {
		t.Errorf("a detached sandbox is owned by %d", kept.Info().OwnerPID)
	}
	report, err := c.Gc(ctx)
	if err != nil || slices.Contains(report.Reaped, kept.ID()) {
		t.Fatalf("gc %+v %v", report, err)
	}
	if r, err := kept.Exec(ctx, []string{"true"}); err != nil || !r.OK() {
		t.Fatalf("a live sandbox after gc: %+v %v", r, err)
	}
}

// syncBuffer is an io.Writer that says when it holds a string.
type syncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newSyncBuffer(want string) *syncBuffer {
	return &syncBuffer{want: want, seen: make(chan struct{})}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	had := strings.Contains(b.buf.String(), b.want)
	b.buf.Write(p)
	if !had && strings.Contains(b.buf.String(), b.want) {
		close(b.seen)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestOutputStreamsLiveAndStdinIsInteractive(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	out, errOut := newSyncBuffer("ready\n"), newSyncBuffer("")
	// The command waits for a line we send only after seeing its first output: that
	// output must have arrived while it ran.
	p, err := sb.Start(ctx, Shell("echo ready; echo oops >&2; read line; echo got $line; cat"), ExecOptions{Stdout: out, Stderr: errOut})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.seen:
	case <-time.After(60 * time.Second):
		t.Fatalf("no live output; so far %q", out.String())
	}
	if _, err := p.Write([]byte("hello\nand the rest")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if want := "ready\ngot hello\nand the rest"; out.String() != want || string(r.Stdout) != want || errOut.String() != "oops\n" {
		t.Fatalf("live %q, result %q, stderr %q", out.String(), r.Stdout, errOut.String())
	}
	// A reader as stdin, larger than one message carries.
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	r, err = sb.Exec(ctx, Shell("wc -c"), ExecOptions{Stdin: bytes.NewReader(big)})
	if err != nil || strings.TrimSpace(string(r.Stdout)) != "3145728" {
		t.Fatalf("stdin of 3 MiB: %q %v", r.Stdout, err)
	}
	// Killed from the caller: the result says so.
	p, err = sb.Start(ctx, Shell("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(); err != nil || r.OK() || r.Signal != 9 {
		t.Fatalf("killed: %+v %v", r, err)
	}
}

func TestExecOptions(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	r := run(t, sb, "pwd; echo $X", ExecOptions{Cwd: "/usr", Env: map[string]string{"X": "y"}})
	if string(r.Stdout) != "/usr\ny\n" {
		t.Errorf("cwd/env: %q", r.Stdout)
	}
	r = run(t, sb, "sleep 30", ExecOptions{Timeout: 500 * time.Millisecond})
	if !r.TimedOut || r.OK() {
		t.Errorf("timeout: %+v", r)
	}
	r = run(t, sb, "head -c 100000 /dev/zero", ExecOptions{OutputLimit: 1000})
	if !r.Truncated() || len(r.Stdout) > 1000 || r.StdoutDropped == 0 {
		t.Errorf("output limit: %d bytes kept, %d dropped", len(r.Stdout), r.StdoutDropped)
	}
	if _, err := sb.Exec(ctx, nil); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("empty argv: %v", err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}, ExecOptions{}, ExecOptions{}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("two options: %v", err)
	}
	// Background: what the command starts keeps running; without it, it ends with it.
	run(t, sb, "sleep 301 &")
	run(t, sb, "sleep 302 &", ExecOptions{Background: true})
	ps := string(run(t, sb, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done").Stdout)
	if strings.Contains(ps, "sleep 301") || !strings.Contains(ps, "sleep 302") {
		t.Errorf("processes after the execs:\n%s", ps)
	}
}

func TestRunCode(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{Language: "python"})
	r, err := sb.RunCode(ctx, "", "print(6 * 7)")
	if err != nil || string(r.Stdout) != "42\n" {
		t.Fatalf("python: %+v %v", r, err)
	}
	r, err = sb.RunCode(ctx, "bash", "echo $((6 * 7))")
	if err != nil || string(r.Stdout) != "42\n" {
		t.Fatalf("bash: %+v %v", r, err)
	}
	if _, err := sb.RunCode(ctx, "cobol", "x"); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("cobol: %v", err)
	}
	r, err = c.RunCode(ctx, "python", "import sys; sys.exit(4)", RunOptions{Timeout: 20 * time.Second})
	if err != nil || r.ExitCode != 4 {
		t.Fatalf("one-shot: %+v %v", r, err)
	}
	// A language whose interpreter this host (the daemon's) lacks: the sandbox on the
	// host's root says how to get one.
	for _, p := range presets {
		if p.names[0] == "typescript" {
			continue
		}
		if _, err := exec.LookPath(p.interpreter[0]); err == nil {
			continue
		}
		_, err := sb.RunCode(ctx, p.names[0], "1")
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "Language: \""+p.names[0]+"\"") {
			t.Errorf("%s without its interpreter: %v", p.names[0], err)
		}
		break
	}
	// The package-level functions use STOCKADE_HOST.
	t.Setenv("STOCKADE_HOST", daemon.addr)
	r, err = RunCode(ctx, "sh", "echo default client")
	if err != nil || string(r.Stdout) != "default client\n" {
		t.Fatalf("package RunCode: %+v %v", r, err)
	}
	langs, err := c.AvailableLanguages(ctx)
	if err != nil || !slices.Contains(langs, "python") || !slices.Contains(langs, "sh") {
		t.Fatalf("available languages %v %v", langs, err)
	}
}

func TestFiles(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(sb.WriteFile(ctx, "/tmp/proj/src/main.py", []byte("print('hello')\n# TODO one\n# TODO two\n")))
	must(sb.WriteFileMode(ctx, "/tmp/proj/run.sh", []byte("#!/bin/sh\necho run\n"), 0o755))
	data, err := sb.ReadFile(ctx, "/tmp/proj/src/main.py")
	if err != nil || !strings.HasPrefix(string(data), "print('hello')") {
		t.Fatalf("read %q %v", data, err)
	}
	part, size, eof, err := sb.ReadRange(ctx, "/tmp/proj/src/main.py", 7, 5)
	if err != nil || string(part) != "hello" || size != uint64(len(data)) || eof {
		t.Fatalf("range %q %d %v %v", part, size, eof, err)
	}
	if r := run(t, sb, "/tmp/proj/run.sh"); string(r.Stdout) != "run\n" {
		t.Fatalf("mode: %+v", r)
	}
	if n, err := sb.Edit(ctx, "/tmp/proj/src/main.py", "TODO", "DONE", true); err != nil || n != 2 {
		t.Fatalf("edit %d %v", n, err)
	}
	if _, err := sb.Edit(ctx, "/tmp/proj/src/main.py", "DONE", "x", false); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("ambiguous edit: %v", err)
	}
	entries, err := sb.List(ctx, "/tmp/proj")
	if err != nil || len(entries) != 2 {
		t.Fatalf("list %v %v", entries, err)
	}
	for _, e := range entries {
		if (e.Name == "src") != e.IsDir() || (e.Name == "run.sh" && e.Mode.Perm() != 0o755) {
			t.Errorf("entry %+v", e)
		}
	}
	st, err := sb.Stat(ctx, "/tmp/proj/src/main.py")
	if err != nil || st.Kind != "file" || st.Size == 0 || st.MTime.IsZero() || len(st.Xattrs) != 0 {
		t.Fatalf("stat %+v %v", st, err)
	}
	must(sb.SetXattrs(ctx, "/tmp/proj/src/main.py", map[string]string{"user.owner": "team-a"}))
	if st, err := sb.Stat(ctx, "/tmp/proj/src/main.py"); err != nil || st.Xattrs["user.owner"] != "team-a" || len(st.Xattrs) != 1 {
		t.Fatalf("xattrs %+v %v", st, err)
	}
	if err := sb.SetXattrs(ctx, "/tmp/proj/src/main.py", map[string]string{"trusted.x": "1"}); !errors.Is(err, ErrInvalidSpec) ||
		!strings.Contains(err.Error(), "user namespace") {
		t.Fatalf("trusted xattr: %v", err)
	}
	paths, _, err := sb.Glob(ctx, "**/*.py", "/tmp/proj")
	if err != nil || len(paths) != 1 || !strings.HasSuffix(paths[0], "src/main.py") {
		t.Fatalf("glob %v %v", paths, err)
	}
	matches, _, err := sb.Grep(ctx, "DONE (one|two)", "/tmp/proj", GrepOptions{Include: "*.py", MaxMatches: 1})
	if err != nil || len(matches) != 1 || matches[0].LineNumber != 2 || !strings.Contains(matches[0].Line, "DONE one") {
		t.Fatalf("grep %+v %v", matches, err)
	}
	must(sb.Mkdir(ctx, "/tmp/a/b/c"))
	if err := sb.Mkdir(ctx, "/tmp/proj/run.sh"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("mkdir over a file: %v", err)
	}
	_, err = sb.ReadFile(ctx, "/tmp/nope.txt")
	var se *Error
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Path != "/tmp/nope.txt" {
		t.Errorf("missing file: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/tmp"); !errors.As(err, &se) || !se.IsDir() {
		t.Errorf("read of a directory: %v", err)
	}
	if err := sb.WriteFile(ctx, "/usr/pwned", []byte("x")); !errors.Is(err, ErrDenied) && !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("write to the read-only root: %v", err)
	}
	must(sb.Remove(ctx, "/tmp/a"))
	if _, err := sb.Stat(ctx, "/tmp/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after remove: %v", err)
	}
	// Upload a host tree, download it back and unpack it on the host.
	src := filepath.Join(t.TempDir(), "tree")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f.txt"), []byte("uploaded"), 0o644)
	must(sb.UploadPath(ctx, src, "/tmp/in"))
	if got, err := sb.ReadFile(ctx, "/tmp/in/tree/d/f.txt"); err != nil || string(got) != "uploaded" {
		t.Fatalf("upload: %q %v", got, err)
	}
	archive, err := sb.Download(ctx, "/tmp/in")
	if err != nil || len(archive) == 0 {
		t.Fatalf("download: %v", err)
	}
	dest := t.TempDir()
	must(sb.DownloadTo(ctx, "/tmp/in", dest))
	if got, err := os.ReadFile(filepath.Join(dest, "tree", "d", "f.txt")); err != nil || string(got) != "uploaded" {
		t.Fatalf("download to: %q %v", got, err)
	}
	must(sb.Upload(ctx, "/tmp/raw", tarball(t, [2]string{"x.txt", "raw tar"})))
	if got, _ := sb.ReadFile(ctx, "/tmp/raw/x.txt"); string(got) != "raw tar" {
		t.Fatalf("upload of tar bytes: %q", got)
	}
}

func TestSessionsKeepTheirWorkspace(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	name := "go-sdk-test-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	sb, err := c.Session(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSession(context.Background(), name) })
	if r := run(t, sb, "pwd; echo kept > notes.txt"); string(r.Stdout) != "/work\n" {
		t.Fatalf("session workdir: %q", r.Stdout)
	}
	first := sb.ID()
	sessions, err := c.Sessions(ctx)
	if err != nil || !slices.ContainsFunc(sessions, func(s SessionInfo) bool { return s.Name == name && s.SandboxID == first }) {
		t.Fatalf("sessions %+v %v", sessions, err)
	}
	if err := sb.Close(); err != nil { // releases: the sandbox ends, the workspace stays
		t.Fatal(err)
	}
	again, err := c.Session(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID() == first || again.SessionName() != name {
		t.Fatalf("a released session must get a new sandbox (%s, %s)", again.ID(), first)
	}
	if got, err := again.ReadFile(ctx, "/work/notes.txt"); err != nil || string(got) != "kept\n" {
		t.Fatalf("workspace: %q %v", got, err)
	}
	if err := c.DeleteSession(ctx, name); err != nil {
		t.Fatal(err)
	}
	sessions, _ = c.Sessions(ctx)
	if slices.ContainsFunc(sessions, func(s SessionInfo) bool { return s.Name == name }) {
		t.Fatal("a deleted session is still listed")
	}
}

func TestPauseResumeAndSnapshotsOnNative(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	run(t, sb, "echo before > /tmp/state")
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := sb.Inspect(ctx); err != nil || info.State != "paused" {
		t.Fatalf("inspect paused: %+v %v", info, err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}); !errors.Is(err, ErrPaused) || !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("exec while paused: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/tmp/state"); !errors.Is(err, ErrPaused) {
		t.Fatalf("read while paused: %v", err)
	}
	// Native cannot copy a process tree: fork and snapshots are refused by name.
	if _, err := sb.Fork(ctx, 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "fork") {
		t.Errorf("fork: %v", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.ReadFile(ctx, "/tmp/state"); err != nil || string(got) != "before\n" {
		t.Fatalf("after resume: %q %v", got, err)
	}
	if _, err := sb.Snapshot(ctx, "go-sdk-snap"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("snapshot on native: %v", err)
	}
	snaps, err := c.Snapshots(ctx)
	if err != nil || slices.ContainsFunc(snaps, func(s SnapshotInfo) bool { return s.Name == "go-sdk-snap" }) {
		t.Errorf("snapshots %v %v", snaps, err)
	}
	if _, err := c.FromSnapshot(ctx, "go-sdk-no-such-snapshot", false); err == nil {
		t.Error("a sandbox from a snapshot that does not exist")
	}
}

func TestErrorsCarryTheDaemonsCodes(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	_, err := c.Attach(ctx, "sb-000000000000")
	var se *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Code != CodeNotFound || !strings.Contains(se.Message, "sb-000000000000") {
		t.Fatalf("missing sandbox: %v", err)
	}
	_, err = c.Create(ctx, Spec{Memory: "1k", Pids: 5_000_000})
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "limits.memory_bytes") || !strings.Contains(err.Error(), "limits.pids") {
		t.Fatalf("a spec with two bad values must name both: %v", err)
	}
	if _, err = c.Create(ctx, Spec{Memory: "lots"}); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), `"lots"`) {
		t.Fatalf("a size that is not one: %v", err)
	}
	_, err = Connect(ctx, Options{Host: "unix://" + filepath.Join(t.TempDir(), "nobody.sock")})
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &se) || !strings.Contains(se.Fix, "stockade serve") {
		t.Fatalf("no daemon: %v", err)
	}
	if _, err := Connect(ctx, Options{Host: "ftp://nowhere"}); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "unix:///path") {
		t.Fatalf("bad host: %v", err)
	}
	// A sandbox destroyed during a call: the call says it is gone.
	sb := sandbox(t, c, Spec{})
	p, err := sb.Start(ctx, Shell("echo started; sleep 60"), ExecOptions{Stdout: newSyncBuffer("")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitStarted(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait()
	if err == nil && r.OK() {
		t.Fatalf("an exec outlived its sandbox: %+v", r)
	}
	if err != nil && !errors.Is(err, ErrGone) && !errors.Is(err, ErrNotFound) {
		t.Fatalf("exec in a destroyed sandbox: %v", err)
	}
}

func TestContextCancellationKillsTheCommand(t *testing.T) {
	c := client(t)
	sb := sandbox(t, c, Spec{})
	alive := func(marker string) bool {
		ps := string(run(t, sb, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done").Stdout)
		return strings.Contains(ps, marker)
	}
	gone := func(marker string) {
		t.Helper()
		for i := 0; i < 200 && alive(marker); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(marker) {
			t.Fatalf("%s still runs after its context ended", marker)
		}
	}
	// A plain exec (the unary call).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := sb.Exec(ctx, Shell("sleep 401")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unary exec: %v", err)
	}
	gone("sleep 401")
	// A streamed one, cancelled once it runs.
	ctx, cancel = context.WithCancel(context.Background())
	out := newSyncBuffer("up")
	p, err := sb.Start(ctx, Shell("echo up; sleep 402"), ExecOptions{Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	<-out.seen
	cancel()
	if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("streamed exec: %v", err)
	}
	gone("sleep 402")
	// Cancelled at once, before the daemon says it started; and a deadline during an
	// exec reading its stdin.
	ctx, cancel = context.WithCancel(context.Background())
	p, err = sb.Start(ctx, Shell("sleep 403"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := p.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled at once: %v", err)
	}
	gone("sleep 403")
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stdin, never := io.Pipe() // never written: the command waits on it
	defer never.Close()
	if _, err := sb.Exec(ctx, Shell("cat; sleep 404"), ExecOptions{Stdin: stdin}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec with stdin: %v", err)
	}
	gone("cat; sleep 404")
	// Every call takes the context.
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := c.Create(done, Spec{}); !errors.Is(err, context.Canceled) {
		t.Errorf("create: %v", err)
	}
	if _, err := sb.ReadFile(done, "/etc/hostname"); !errors.Is(err, context.Canceled) {
		t.Errorf("read: %v", err)
	}
	if _, err := c.List(done); !errors.Is(err, context.Canceled) {
		t.Errorf("list: %v", err)
	}
}

func TestToolCallsRunInASandbox(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	decode := func(r ToolResult) map[string]any {
		var out map[string]any
		if err := json.Unmarshal([]byte(r.JSON()), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := decode(c.HandleToolCall(ctx, []byte(`{"language": "python", "code": "print(2 + 2)"}`), ToolOptions{}))
	if out["ok"] != true || out["stdout"] != "4\n" || out["exit_code"] != 0.0 {
		t.Fatalf("tool call: %v", out)
	}
	out = decode(c.HandleToolCall(ctx, []byte(`{"language": "python", "code": "raise SystemExit(3)"}`), ToolOptions{}))
	if out["ok"] != false || out["exit_code"] != 3.0 || out["error"] != nil {
		t.Fatalf("failing code: %v", out)
	}
	out = decode(c.HandleToolCall(ctx, []byte(`{"language": "python", "code": "while True: pass"}`), ToolOptions{Timeout: time.Second}))
	if out["ok"] != false || out["timed_out"] != true {
		t.Fatalf("timeout: %v", out)
	}
	out = decode(c.HandleToolCall(ctx, []byte(`{"language": "cobol", "code": "DISPLAY 1"}`), ToolOptions{}))
	if e, _ := out["error"].(map[string]any); out["ok"] != false || e["code"] != "invalid_spec" || !strings.Contains(e["message"].(string), "unknown language") {
		t.Fatalf("unknown language: %v", out)
	}
	schema := RunCodeSchema(must(c.AvailableLanguages(ctx)))
	enum := schema["properties"].(map[string]any)["language"].(map[string]any)["enum"].([]string)
	if !slices.Contains(enum, "python") {
		t.Fatalf("enum %v", enum)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestDetachReturnsAtOnceAndTheCommandRunsOn(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	start := time.Now()
	d, err := sb.Detach(ctx, Shell("echo up; echo oops >&2; sleep 60"))
	if err != nil {
		t.Fatalf("detach: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second || d.Pid <= 1 {
		t.Fatalf("detach took %v, pid %d", took, d.Pid)
	}
	var out []byte
	for i := 0; i < 100 && !strings.Contains(string(out), "oops"); i++ {
		out, _ = d.Output(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	if string(out) != "up\noops\n" {
		t.Errorf("output: %q", out)
	}
	if running, err := d.Running(ctx); !running || err != nil {
		t.Errorf("running: %v %v", running, err)
	}
	if err := d.Kill(ctx, 15); err != nil {
		t.Errorf("kill: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.Wait(wctx); err != nil {
		t.Errorf("wait: %v", err)
	}
	quiet, err := sb.Detach(ctx, Shell("echo quiet"), DetachOptions{DiscardOutput: true})
	if err != nil || quiet.Log != "" {
		t.Fatalf("discard: %v %+v", err, quiet)
	}
	if _, err := quiet.Output(ctx); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("output of a discarded one: %v", err)
	}
	if _, err := sb.Detach(ctx, []string{"/no/such/program"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing program: %v", err)
	}
}
