package stockade

import (
	"context"
	"time"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// Sessions are named, persistent workspaces: the daemon keeps a directory per name,
// mounted read-write at /work (the working directory) in the session's sandbox,
// which concurrent callers share and which ends after 10 idle minutes. The
// workspace outlives its sandboxes until DeleteSession.

// SessionInfo describes a session.
type SessionInfo struct {
	Name string
	// Workspace is the directory on the daemon's host.
	Workspace string
	// SandboxID is the live sandbox's id, empty when none is live.
	SandboxID string
	LastUsed  time.Time
}

// Session is the sandbox of the session name, created when none is live. Its
// Destroy and Close release it: the sandbox ends, the workspace stays.
func (c *Client) Session(ctx context.Context, name string) (*Sandbox, error) {
	r, err := c.rpc.SessionGet(ctx, &pb.SessionRef{Name: name})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return &Sandbox{c: c, id: r.Id, info: infoOf(r), session: name}, nil
}

// ReleaseSession ends the session's sandbox, keeping its workspace.
func (c *Client) ReleaseSession(ctx context.Context, name string) error {
	_, err := c.rpc.SessionRelease(ctx, &pb.SessionRef{Name: name})
	return c.fail(ctx, err)
}

// DeleteSession ends the session's sandbox and deletes its workspace.
func (c *Client) DeleteSession(ctx context.Context, name string) error {
	_, err := c.rpc.SessionDelete(ctx, &pb.SessionRef{Name: name})
	return c.fail(ctx, err)
}

// Sessions is the caller's sessions.
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	r, err := c.rpc.SessionList(ctx, &pb.SessionListRequest{})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	out := make([]SessionInfo, 0, len(r.Sessions))
	for _, s := range r.Sessions {
		out = append(out, SessionInfo{Name: s.Name, Workspace: s.Workspace, SandboxID: s.GetSandboxId(),
			LastUsed: time.UnixMilli(int64(s.LastUsedMs))})
	}
	return out, nil
}

// SessionName is the session this sandbox belongs to, empty for a plain sandbox.
func (s *Sandbox) SessionName() string { return s.session }
