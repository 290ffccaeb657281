package stockade

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DaemonStartTimeout is how long Connect waits for a daemon it started to answer.
const DaemonStartTimeout = 60 * time.Second

// FindCLI finds the stockade binary: cli when given, else $STOCKADE_CLI, else
// `stockade` on PATH.
func FindCLI(cli string) (string, error) {
	if cli == "" {
		cli = env("STOCKADE_CLI")
	}
	if cli != "" {
		if st, err := os.Stat(cli); err != nil || st.IsDir() {
			return "", newError(CodeUnavailable, fmt.Sprintf("the stockade CLI is unavailable: %s does not exist "+
				"(fix: point STOCKADE_CLI at the stockade binary; build it with `scripts/setup.sh debug` at the repository root)", cli))
		}
		return cli, nil
	}
	p, err := exec.LookPath("stockade")
	if err != nil {
		return "", newError(CodeUnavailable, "the stockade CLI is unavailable: stockade is not on PATH "+
			"(fix: install stockade on PATH or set STOCKADE_CLI to it; build it with `scripts/setup.sh debug` at the repository root)")
	}
	return p, nil
}

// startDaemon starts `stockade serve` on the unix socket sock, detached (its own
// session, output in sock + ".log"), unless another process did so first, and waits
// until the socket accepts connections. A lock file beside the socket makes
// concurrent callers start one daemon.
func startDaemon(ctx context.Context, sock, cli string) error {
	bin, err := FindCLI(cli)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return unavailableDaemon(sock, fmt.Sprintf("cannot create %s: %v", filepath.Dir(sock), err), "")
	}
	lock, err := os.OpenFile(sock+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return unavailableDaemon(sock, fmt.Sprintf("cannot open %s.lock: %v", sock, err), "")
	}
	defer lock.Close()
	if err := flock(ctx, lock); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if answers(sock) {
		return nil // another caller started it while we waited for the lock
	}
	logPath := sock + ".log"
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return unavailableDaemon(sock, fmt.Sprintf("cannot open its log %s: %v", logPath, err), "")
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "serve", "--listen", "unix://"+sock)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = withoutEnv(os.Environ(), "STOCKADE_HOST")
	// Its own session: the caller's terminal signals and exit do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return unavailableDaemon(sock, fmt.Sprintf("cannot run %s serve: %v", bin, err), logPath)
	}
	exited := make(chan error, 1)
	// Reaped if it ends while this process lives; otherwise it outlives us.
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(DaemonStartTimeout)
	for {
		if answers(sock) {
			return nil
		}
		select {
		case err := <-exited:
			return unavailableDaemon(sock, fmt.Sprintf("%s serve exited (%v): %s", bin, err, tail(logPath)), logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return unavailableDaemon(sock, fmt.Sprintf("%s serve did not answer within %s: %s", bin, DaemonStartTimeout, tail(logPath)), logPath)
		}
	}
}

func unavailableDaemon(sock, why, log string) error {
	fix := "start one with `stockade serve`, or set STOCKADE_HOST to a daemon"
	if log != "" {
		fix = "see " + log + "; " + fix
	}
	return newError(CodeUnavailable, fmt.Sprintf("stockaded at unix://%s is unavailable: no daemon answered and starting one failed: %s (fix: %s)", sock, why, fix))
}

// flock takes an exclusive lock on f, giving up when ctx ends.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return newError(CodeInternal, fmt.Sprintf("cannot lock %s: %v", f.Name(), err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// answers reports whether something accepts connections on the unix socket.
func answers(sock string) bool {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func withoutEnv(envs []string, name string) []string {
	out := envs[:0:0]
	for _, e := range envs {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// tail is the end of a log file, on one line.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	if s == "" {
		return "(nothing logged)"
	}
	return strings.ReplaceAll(s, "\n", " | ")
}
