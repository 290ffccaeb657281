package stockade

// The integration tests drive a real daemon: TestMain starts `stockade serve` (the
// binary at $STOCKADE_CLI, else `stockade` on PATH) on a unix socket in a temporary
// directory, with a temporary state directory, as the Python SDK's remote tests do.
// Without the binary the integration tests skip, and fail when CI is set. The native
// provider needs root (or, with STOCKADE_TEST_ROOTLESS=1, a rootless setup).

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stockade-dev/stockade/sdk/go/internal/testdaemon"
)

var daemon struct {
	addr    string // unix://... of the test daemon
	cli     string
	problem string // why integration tests cannot run
}

func TestMain(m *testing.M) {
	if os.Getenv(autostartHelperEnv) != "" {
		os.Exit(autostartHelper())
	}
	os.Unsetenv("STOCKADE_HOST")
	cli, err := FindCLI("")
	daemon.cli = cli
	daemon.problem = testdaemon.Problem(cli, err)
	var d *testdaemon.Daemon
	if daemon.problem == "" {
		if d, err = testdaemon.Start(cli); err != nil {
			daemon.problem = err.Error()
		} else {
			daemon.addr = d.Addr
		}
	}
	if daemon.problem != "" && os.Getenv("CI") != "" {
		fmt.Fprintf(os.Stderr, "FAIL: %s\n", daemon.problem)
		os.Exit(1)
	}
	code := m.Run()
	if d != nil {
		d.Stop()
	}
	os.Exit(code)
}

// processAlive reports whether pid runs (a zombie has exited).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}

// needDaemon skips (or fails, in CI) a test that needs the test daemon.
func needDaemon(t *testing.T) {
	t.Helper()
	if daemon.problem != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(daemon.problem)
		}
		t.Skip(daemon.problem)
	}
}

// client is a Client of the test daemon, closed at the test's end.
func client(t *testing.T) *Client {
	t.Helper()
	needDaemon(t)
	c, err := Connect(context.Background(), Options{Host: daemon.addr, CLI: daemon.cli})
	if err != nil {
		t.Fatalf("connect to the test daemon: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sandbox is a fresh sandbox of spec, destroyed at the test's end.
func sandbox(t *testing.T, c *Client, spec Spec) *Sandbox {
	t.Helper()
	sb, err := c.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// run runs a shell script in sb and fails the test on an error (not on an exit code).
func run(t *testing.T, sb *Sandbox, script string, opts ...ExecOptions) *Result {
	t.Helper()
	r, err := sb.Exec(context.Background(), Shell(script), opts...)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return r
}
