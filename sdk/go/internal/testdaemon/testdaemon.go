// Package testdaemon starts `stockade serve` for the SDK's tests: a real daemon on a
// unix socket (or any --listen) in a temporary directory, with its state there, as
// the Python SDK's remote-mode tests do.
package testdaemon

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Daemon is a running `stockade serve`.
type Daemon struct {
	// Addr is the unix:// address of a daemon made by Start.
	Addr string
	// Dir holds its state and its log (daemon.log).
	Dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // how it exited, once done
}

// Serve starts `cli serve --state-dir DIR/state ARGS`, its log in dir/daemon.log.
func Serve(cli, dir string, args ...string) (*Daemon, error) {
	log, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(cli, append([]string{"serve", "--state-dir", filepath.Join(dir, "state")}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start %s serve: %v", cli, err)
	}
	d := &Daemon{Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	return d, nil
}

// Start starts a daemon on a unix socket in a new temporary directory and waits
// until it answers; Stop removes the directory.
func Start(cli string) (*Daemon, error) {
	dir, err := os.MkdirTemp("", "stockade-go-test-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "d.sock")
	d, err := Serve(cli, dir, "--listen", "unix://"+sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.Addr = "unix://" + sock
	if err := d.WaitFor(func() bool { return Dials("unix", sock) }); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// Dials reports whether something accepts connections at addr.
func Dials(network, addr string) bool {
	c, err := net.DialTimeout(network, addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// WaitFor waits until ready, failing when the daemon exits or after 60 s.
func (d *Daemon) WaitFor(ready func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		select {
		case <-d.done:
			return fmt.Errorf("stockade serve exited (%v): %s", d.err, d.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stockade serve did not answer in 60 s: %s", d.Log())
		}
	}
	return nil
}

// Log is the end of the daemon's log.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "daemon.log"))
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// Stop stops the daemon as a clean shutdown does (SIGTERM; killed after 30 s) and,
// for a daemon made by Start, removes its directory.
func (d *Daemon) Stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	if d.Addr != "" {
		os.RemoveAll(d.Dir)
	}
}

// Problem says why the integration tests cannot run here, or "" when they can: the
// stockade binary (cli, or an error finding it) and root, which the native provider
// needs (or STOCKADE_TEST_ROOTLESS=1 after a rootless setup).
func Problem(cli string, findErr error) string {
	if findErr != nil {
		return fmt.Sprintf("the integration tests need the stockade binary: set STOCKADE_CLI to it, "+
			"or build it with `scripts/setup.sh debug` at the repository root (sdk/go/test.sh then sets "+
			"STOCKADE_CLI=${CARGO_TARGET_DIR:-/var/cache/stockade/target}/debug/stockade): %v", findErr)
	}
	if os.Geteuid() != 0 && os.Getenv("STOCKADE_TEST_ROOTLESS") != "1" {
		return "the native provider needs root: run the Go SDK's tests as root (sdk/go/test.sh), " +
			"or set STOCKADE_TEST_ROOTLESS=1 after `stockade setup rootless --user NAME`"
	}
	return ""
}
