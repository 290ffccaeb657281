package stockade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// ExecOptions are the options of one command. Every field is optional.
type ExecOptions struct {
	// Timeout is the command's deadline: at it, everything the command started is
	// killed and the Result says TimedOut.
	Timeout time.Duration
	// Stdin is copied to the command's standard input, which then closes.
	Stdin io.Reader
	// Stdout and Stderr receive the output live, as it comes (it is also in the
	// Result, within OutputLimit).
	Stdout io.Writer
	Stderr io.Writer
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Cwd is the working directory (default: the sandbox's).
	Cwd string
	// OutputLimit is the bytes kept per stream in the Result, head and tail
	// (default 1 MiB).
	OutputLimit int64
	// Background leaves what the command starts (`server &`) running after it
	// exits, until the sandbox ends. By default everything it started ends with it.
	Background bool
	// Terminal runs the command on a terminal of this size (Start only): what it
	// shows goes to Stdout, Process.Write types on it, Process.Resize changes it.
	Terminal *TerminalSize
}

// Result is how a command ended. A non-zero ExitCode is a result, not an error.
type Result struct {
	ExitCode int
	// Signal is the signal that ended it (0: none).
	Signal int
	// Stdout and Stderr are the captured output (head and tail within OutputLimit).
	Stdout []byte
	Stderr []byte
	// TimedOut says the deadline killed it; OOMKilled that the memory limit did.
	TimedOut  bool
	OOMKilled bool
	// StdoutDropped and StderrDropped count the bytes past the limit, left out.
	StdoutDropped uint64
	StderrDropped uint64
	Duration      time.Duration
	// EgressDenied is what the sandbox's egress policy refused during the command.
	EgressDenied []EgressDenial
}

// OK reports whether the command exited 0 within its deadline.
func (r *Result) OK() bool { return r.ExitCode == 0 && !r.TimedOut }

// Truncated reports whether output past the limit was left out.
func (r *Result) Truncated() bool { return r.StdoutDropped > 0 || r.StderrDropped > 0 }

func resultOf(o *pb.ExecOutcome) *Result {
	return &Result{
		ExitCode: int(o.ExitCode), Signal: int(o.GetSignal()), Stdout: o.Stdout, Stderr: o.Stderr,
		TimedOut: o.TimedOut, OOMKilled: o.OomKilled, StdoutDropped: o.StdoutDropped, StderrDropped: o.StderrDropped,
		Duration: time.Duration(o.DurationMs) * time.Millisecond, EgressDenied: denialsOf(o.EgressDenied),
	}
}

// Shell is the argv that runs script with /bin/sh -c.
func Shell(script string) []string { return []string{"/bin/sh", "-c", script} }

func one(opts []ExecOptions) (ExecOptions, error) {
	switch len(opts) {
	case 0:
		return ExecOptions{}, nil
	case 1:
		return opts[0], nil
	}
	return ExecOptions{}, invalid(fmt.Sprintf("give at most one ExecOptions, not %d", len(opts)))
}

func (s *Sandbox) request(argv []string, o ExecOptions) (*pb.ExecRequest, error) {
	if len(argv) == 0 {
		return nil, invalid("argv is empty; give a command to run (stockade.Shell(script) runs a shell script)")
	}
	if o.Timeout < 0 || o.OutputLimit < 0 {
		return nil, invalid("exec Timeout and OutputLimit must not be negative")
	}
	req := &pb.ExecRequest{SandboxId: s.id, Argv: argv, Env: o.Env, Background: o.Background,
		OutputLimitBytes: uint64(o.OutputLimit)}
	if o.Cwd != "" {
		req.Cwd = &o.Cwd
	}
	if o.Timeout > 0 {
		ms := uint64(max(1, o.Timeout.Milliseconds()))
		req.TimeoutMs = &ms
	}
	if o.Terminal != nil {
		size, err := o.Terminal.wire()
		if err != nil {
			return nil, err
		}
		req.Tty = size
	}
	return req, nil
}

// Exec runs argv in the sandbox and waits for it. Cancelling ctx kills the command
// and everything it started, and Exec returns ctx's error.
func (s *Sandbox) Exec(ctx context.Context, argv []string, opts ...ExecOptions) (*Result, error) {
	o, err := one(opts)
	if err != nil {
		return nil, err
	}
	if o.Terminal != nil {
		return nil, invalid("a terminal takes keys while its command runs: use Start with ExecOptions.Terminal")
	}
	if o.Stdin != nil || o.Stdout != nil || o.Stderr != nil {
		p, err := s.start(ctx, argv, o, o.Stdin != nil)
		if err != nil {
			return nil, err
		}
		return p.Wait()
	}
	req, err := s.request(argv, o)
	if err != nil {
		return nil, err
	}
	r, err := s.c.rpc.Exec(ctx, req)
	if err != nil {
		return nil, s.c.fail(ctx, err)
	}
	return resultOf(r), nil
}

// Process is a command started with Start: write its stdin, kill it, wait for it.
type Process struct {
	sb      *Sandbox
	ctx     context.Context
	cancel  context.CancelFunc
	started chan struct{} // closed once the exec id is known (or the stream ended)
	done    chan struct{}
	execID  string
	result  *Result
	err     error
	mu      sync.Mutex // serializes stdin
}

// Start starts argv in the sandbox and returns at once; output goes to
// opts.Stdout and opts.Stderr live. Without opts.Stdin the command's stdin stays open
// for Process.Write until CloseStdin. Cancelling ctx kills the command.
func (s *Sandbox) Start(ctx context.Context, argv []string, opts ...ExecOptions) (*Process, error) {
	o, err := one(opts)
	if err != nil {
		return nil, err
	}
	return s.start(ctx, argv, o, true)
}

func (s *Sandbox) start(ctx context.Context, argv []string, o ExecOptions, keepStdin bool) (*Process, error) {
	req, err := s.request(argv, o)
	if err != nil {
		return nil, err
	}
	req.KeepStdinOpen = keepStdin
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The stream outlives ctx until the exec is killed by its id (see watch).
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := s.c.rpc.ExecStream(sctx, req)
	if err != nil {
		cancel()
		return nil, s.c.fail(ctx, err)
	}
	p := &Process{sb: s, ctx: ctx, cancel: cancel, started: make(chan struct{}), done: make(chan struct{})}
	go p.receive(stream.Recv, o.Stdout, o.Stderr)
	go p.watch()
	if o.Stdin != nil {
		go p.copyStdin(o.Stdin)
	}
	return p, nil
}

// killGrace bounds how long an exec whose context ended is waited for: its start,
// then its end after the kill.
const killGrace = 5 * time.Second

// watch kills the exec when the caller's context ends. The daemon does not kill a
// streamed exec whose client just goes away (it runs on until it ends by itself),
// so the SDK cancels it by its id first, then ends the stream.
func (p *Process) watch() {
	select {
	case <-p.done:
		return
	case <-p.ctx.Done():
	}
	select {
	case <-p.started:
		p.killDetached()
		select {
		case <-p.done:
		case <-time.After(killGrace):
		}
	case <-p.done:
	case <-time.After(killGrace):
	}
	p.cancel()
}

func (p *Process) receive(recv func() (*pb.ExecEvent, error), stdout, stderr io.Writer) {
	defer close(p.done)
	defer p.cancel()
	startedOnce := sync.OnceFunc(func() { close(p.started) })
	defer startedOnce()
	var writeErr error
	for {
		ev, err := recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = newError(CodeUnavailable, fmt.Sprintf("stockaded at %s is unavailable: the exec in sandbox %s ended without an outcome "+
					"(fix: the daemon stopped or restarted; retry when it is back)", p.sb.c.addr, p.sb.id))
			}
			p.err = p.sb.c.fail(p.ctx, err)
			return
		}
		switch e := ev.Event.(type) {
		case *pb.ExecEvent_Started:
			p.execID = e.Started
			startedOnce()
		case *pb.ExecEvent_Output:
			w := stdout
			if e.Output.Stream == pb.StreamKind_STDERR {
				w = stderr
			}
			if w != nil && writeErr == nil {
				if _, err := w.Write(e.Output.Data); err != nil {
					// Like os/exec: a failed writer ends the command.
					writeErr = fmt.Errorf("stockade: writing the output of sandbox %s: %w", p.sb.id, err)
					p.killDetached()
				}
			}
		case *pb.ExecEvent_Outcome:
			if err := p.ctx.Err(); err != nil {
				p.err = err // killed because the caller's context ended
				return
			}
			p.result, p.err = resultOf(e.Outcome), writeErr
			return
		}
	}
}

// killDetached cancels the exec on the daemon without the caller's (ended) context.
// Only after p.started is closed (p.execID is set by then).
func (p *Process) killDetached() {
	if p.execID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = p.sb.c.rpc.CancelExec(ctx, &pb.CancelExecRequest{ExecId: p.execID})
}

// stdinChunk is the most stdin one ExecInput call carries (the daemon reads 4 MiB).
const stdinChunk = 1 << 20

func (p *Process) copyStdin(r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := p.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = p.CloseStdin()
			return
		}
	}
}

func (p *Process) waitStarted() (string, error) {
	select {
	case <-p.started:
	case <-p.ctx.Done():
		return "", p.ctx.Err()
	}
	if p.execID == "" {
		<-p.done
		if p.err != nil {
			return "", p.err
		}
		return "", newError(CodeInvalidSpec, fmt.Sprintf("the exec in sandbox %s has ended; its stdin is closed", p.sb.id))
	}
	return p.execID, nil
}

func (p *Process) input(data []byte, close bool) error {
	id, err := p.waitStarted()
	if err != nil {
		return err
	}
	_, err = p.sb.c.rpc.ExecInput(p.ctx, &pb.ExecInputRequest{ExecId: id, Data: data, Close: close})
	return p.sb.c.fail(p.ctx, err)
}

// Write sends data to the command's stdin.
func (p *Process) Write(data []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for off := 0; off < len(data); off += stdinChunk {
		if err := p.input(data[off:min(len(data), off+stdinChunk)], false); err != nil {
			return off, err
		}
	}
	return len(data), nil
}

// CloseStdin closes the command's stdin (it reads end of file).
func (p *Process) CloseStdin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.input(nil, true)
}

// Kill kills the command and everything it started; Wait then returns its Result.
func (p *Process) Kill(ctx context.Context) error {
	select {
	case <-p.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	if p.execID == "" {
		return nil // it ended before it started
	}
	_, err := p.sb.c.rpc.CancelExec(ctx, &pb.CancelExecRequest{ExecId: p.execID})
	if err = p.sb.c.fail(ctx, err); err != nil && !isCode(err, CodeNotFound) {
		return err
	}
	return nil
}

// Wait waits for the command to end and returns its Result (or the error that
// ended the call, such as ctx's).
func (p *Process) Wait() (*Result, error) {
	<-p.done
	return p.result, p.err
}
