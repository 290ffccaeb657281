package stockade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// DetachOptions are the options of a detached command. Every field is optional.
type DetachOptions struct {
	// Timeout still kills it, and everything it started, at the deadline.
	Timeout time.Duration
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Cwd is the working directory (default: the sandbox's).
	Cwd string
	// DiscardOutput keeps none of its output.
	DiscardOutput bool
}

// Detached is a command Detach left running in the sandbox.
type Detached struct {
	sb *Sandbox
	// Pid is its pid inside the sandbox (what kill or ps there see).
	Pid uint32
	// Log is the file in the sandbox its stdout and stderr go to ("": discarded).
	Log string
}

// Detach starts argv and returns at once, leaving it running (as docker exec -d):
// its stdin is empty, its output kept in the sandbox (Output) unless
// DiscardOutput, and it ends with the sandbox. A program that does not exist is an
// error matching fs.ErrNotExist.
func (s *Sandbox) Detach(ctx context.Context, argv []string, opts ...DetachOptions) (*Detached, error) {
	var o DetachOptions
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return nil, invalid(fmt.Sprintf("give at most one DetachOptions, not %d", len(opts)))
	}
	req, err := s.request(argv, ExecOptions{Timeout: o.Timeout, Env: o.Env, Cwd: o.Cwd})
	if err != nil {
		return nil, err
	}
	req.Detach, req.DiscardOutput = true, o.DiscardOutput
	out, err := s.c.rpc.Exec(ctx, req)
	if err != nil {
		return nil, s.c.fail(ctx, err)
	}
	if out.Pid == nil {
		why := strings.TrimSpace(string(out.Stderr))
		if why == "" {
			why = fmt.Sprintf("exit code %d", out.ExitCode)
		}
		if out.ExitCode == 127 {
			// The form of a file that is not there (errors.Is(err, fs.ErrNotExist)).
			return nil, newError(CodeNotFound, fmt.Sprintf("path %s not found", argv[0]))
		}
		return nil, invalid("the command did not start: " + why)
	}
	d := &Detached{sb: s, Pid: *out.Pid}
	if !o.DiscardOutput {
		d.Log = fmt.Sprintf("/tmp/.stockade-exec/%d.log", d.Pid)
	}
	return d, nil
}

// Running reports whether it still runs.
func (d *Detached) Running(ctx context.Context) (bool, error) {
	_, err := d.sb.Stat(ctx, fmt.Sprintf("/proc/%d", d.Pid))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Wait waits until it has ended, or ctx ends.
func (d *Detached) Wait(ctx context.Context) error {
	for {
		running, err := d.Running(ctx)
		if err != nil || !running {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill sends it signal (as kill(1) numbers them) from inside the sandbox, as its user.
func (d *Detached) Kill(ctx context.Context, signal int) error {
	r, err := d.sb.Exec(ctx, []string{"kill", fmt.Sprintf("-%d", signal), fmt.Sprint(d.Pid)},
		ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	if running, _ := d.Running(ctx); !r.OK() && running {
		return newError(CodePolicyDenied, fmt.Sprintf("cannot signal process %d: %s", d.Pid, strings.TrimSpace(string(r.Stderr))))
	}
	return nil
}

// Output is what it wrote so far, stdout and stderr interleaved.
func (d *Detached) Output(ctx context.Context) ([]byte, error) {
	if d.Log == "" {
		return nil, invalid(fmt.Sprintf("process %d was started with DiscardOutput", d.Pid))
	}
	return d.sb.ReadFile(ctx, d.Log)
}
