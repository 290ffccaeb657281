package stockade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// DialPort connects to port on the sandbox's own loopback (a server its code
// started), through the daemon: nothing of the sandbox's network is opened to this
// host. Closing the connection, or ctx ending, ends it.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, invalid(fmt.Sprintf("port %d is not a TCP port: give 1 to 65535", port))
	}
	ctx, cancel := context.WithCancel(ctx)
	// The error as the daemon said it, before the call's context is cancelled.
	failed := func(err error) (net.Conn, error) {
		err = s.c.fail(ctx, err)
		cancel()
		return nil, err
	}
	stream, err := s.c.rpc.ConnectPort(ctx)
	if err != nil {
		return failed(err)
	}
	if err := stream.Send(&pb.PortData{SandboxId: s.id, Port: uint32(port)}); err != nil {
		return failed(recvErr(stream, err))
	}
	// The daemon answers once the connection inside is made: a refusal (nothing
	// listens, a paused sandbox) comes instead of the headers.
	md, err := stream.Header()
	if err == nil && md == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		return failed(err)
	}
	ours, theirs := net.Pipe()
	// The caller's bytes to the port; its close (or ctx) closes the sending side.
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := theirs.Read(buf)
			if n > 0 {
				if stream.Send(&pb.PortData{Data: append([]byte(nil), buf[:n]...)}) != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = stream.CloseSend()
	}()
	// The port's bytes back, until it closes.
	go func() {
		defer cancel()
		defer theirs.Close()
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if _, err := theirs.Write(m.Data); err != nil {
				return
			}
		}
	}()
	return ours, nil
}

// recvErr is the daemon's status when a send failed because the call had ended.
func recvErr(stream pb.Stockade_ConnectPortClient, sendErr error) error {
	if errors.Is(sendErr, io.EOF) {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
	return sendErr
}

// Forward is a port of a sandbox on this host's 127.0.0.1 (Sandbox.Forward).
type Forward struct {
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Forward makes port of the sandbox (a server its code started) reachable on this
// host at 127.0.0.1:localPort (0: a free port; see Addr and URL) until Close: each
// connection accepted there is carried to the port by DialPort.
func (s *Sandbox) Forward(ctx context.Context, port, localPort int) (*Forward, error) {
	if port < 1 || port > 65535 {
		return nil, invalid(fmt.Sprintf("port %d is not a TCP port: give 1 to 65535", port))
	}
	if localPort < 0 || localPort > 65535 {
		return nil, invalid(fmt.Sprintf("local port %d is not a TCP port: give 0 to 65535", localPort))
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(localPort)))
	if err != nil {
		return nil, fmt.Errorf("cannot listen on 127.0.0.1:%d: %w", localPort, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Forward{ln: ln, cancel: cancel}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				inside, err := s.DialPort(ctx, port)
				if err != nil {
					return
				}
				defer inside.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(inside, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, inside); done <- struct{}{} }()
				select {
				case <-done:
				case <-ctx.Done():
				}
			}()
		}
	}()
	return f, nil
}

// Addr is where it listens: 127.0.0.1:PORT.
func (f *Forward) Addr() string { return f.ln.Addr().String() }

// URL is http://127.0.0.1:PORT, for a web server inside.
func (f *Forward) URL() string { return "http://" + f.Addr() }

// Close stops listening and ends the connections it carries.
func (f *Forward) Close() error {
	err := f.ln.Close()
	f.cancel()
	f.wg.Wait()
	return err
}
