package stockade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// Sandbox is a live sandbox of the daemon. Its methods are safe for concurrent use.
// Destroy it (or Close it) when done; it also ends with its lifetime, and with this
// process unless it was created with Spec.Detach.
type Sandbox struct {
	c        *Client
	id       string
	info     Info
	language string
	session  string
}

// Info is what the daemon says of a sandbox.
type Info struct {
	ID        string
	Provider  string
	CreatedAt time.Time
	ExpiresAt time.Time
	// OwnerPID is the process whose death ends the sandbox (0: none).
	OwnerPID int
	// Spec is the spec as requested, in the daemon's JSON.
	Spec json.RawMessage
	// Applied is the hardening report, wall by wall.
	Applied []Wall
	// Pooled says it came warm from a pool.
	Pooled bool
	// State is "running" or "paused".
	State string
}

// Wall is one wall of a sandbox as its provider built it.
type Wall struct {
	// Kind says which wall: "isolation", "root", "tmp", "network", "limits", "user",
	// "user_namespace", "lifetime", "capabilities", "no_new_privs", "seccomp",
	// "landlock", "agent_channel", "platform", "mount" or "state".
	Kind string
	// Enforced says whether it stands (false: opted out, or not had on this provider
	// or host).
	Enforced bool
	// Detail says what it is, in words.
	Detail string
}

// String is "kind: detail", with "(not enforced)" after a wall that does not stand.
func (w Wall) String() string {
	if w.Enforced {
		return w.Kind + ": " + w.Detail
	}
	return w.Kind + ": " + w.Detail + " (not enforced)"
}

func infoOf(i *pb.SandboxInfo) Info {
	state := i.State
	if state == "" {
		state = "running"
	}
	walls := make([]Wall, 0, len(i.Applied))
	for _, w := range i.Applied {
		walls = append(walls, Wall{Kind: w.Kind, Enforced: w.Enforced, Detail: w.Detail})
	}
	return Info{
		ID: i.Id, Provider: i.Provider,
		CreatedAt: time.UnixMilli(int64(i.CreatedAtMs)), ExpiresAt: time.UnixMilli(int64(i.ExpiresAtMs)),
		OwnerPID: int(i.OwnerPid), Spec: json.RawMessage(i.SpecJson), Applied: walls,
		Pooled: i.Pooled, State: state,
	}
}

// ownerPID is this process when the daemon can watch it (over its unix socket).
func (c *Client) ownerPID(detach bool) uint32 {
	if detach || c.addr.Unix == "" {
		return 0
	}
	return uint32(os.Getpid())
}

func (c *Client) providerOf(spec Spec) string {
	if spec.Provider != "" {
		return spec.Provider
	}
	return c.provider
}

// Create creates a sandbox from spec (see Spec; the zero value is the secure
// default), or hands over a warm one when the daemon has a pool of this spec.
func (c *Client) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	if spec.Language != "" && spec.Image == "" {
		image, err := c.languageImage(ctx, spec.Language, c.providerOf(spec))
		if err != nil {
			return nil, err
		}
		spec.Image = image
	}
	js, err := spec.specJSON()
	if err != nil {
		return nil, err
	}
	r, err := c.rpc.Create(ctx, &pb.CreateRequest{
		Provider: c.providerOf(spec), SpecJson: marshal(js),
		OwnerPid: c.ownerPID(spec.Detach), NoPool: spec.NoPool,
	})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return &Sandbox{c: c, id: r.Id, info: infoOf(r), language: spec.Language}, nil
}

// Attach is a handle to an existing sandbox (its lifetime and owner are unchanged);
// an unknown id is ErrNotFound.
func (c *Client) Attach(ctx context.Context, id string) (*Sandbox, error) {
	r, err := c.rpc.Inspect(ctx, &pb.SandboxRef{Id: id})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return &Sandbox{c: c, id: r.Id, info: infoOf(r)}, nil
}

// List is the caller's live sandboxes.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	r, err := c.rpc.List(ctx, &pb.ListRequest{})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	out := make([]Info, 0, len(r.Sandboxes))
	for _, s := range r.Sandboxes {
		out = append(out, infoOf(s))
	}
	return out, nil
}

// GcReport says what a garbage collection reaped.
type GcReport struct {
	Reaped []string
	Errors []string
}

// Gc reaps what expired or was left by crashes.
func (c *Client) Gc(ctx context.Context) (*GcReport, error) {
	r, err := c.rpc.Gc(ctx, &pb.GcRequest{})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return &GcReport{Reaped: r.Reaped, Errors: r.Errors}, nil
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Info is what the daemon said of the sandbox when it was created or attached.
func (s *Sandbox) Info() Info { return s.info }

// Inspect is what the daemon says of the sandbox now: its state ("running" or
// "paused") and the expiry, moved by the time spent paused.
func (s *Sandbox) Inspect(ctx context.Context) (Info, error) {
	r, err := s.c.rpc.Inspect(ctx, &pb.SandboxRef{Id: s.id})
	if err != nil {
		return Info{}, s.c.fail(ctx, err)
	}
	return infoOf(r), nil
}

// Destroy kills everything in the sandbox and removes it. It is idempotent: a
// sandbox that is already gone is not an error. A session's sandbox is released
// (its workspace stays).
func (s *Sandbox) Destroy(ctx context.Context) error {
	if s.session != "" {
		return s.c.ReleaseSession(ctx, s.session)
	}
	_, err := s.c.rpc.Destroy(ctx, &pb.SandboxRef{Id: s.id})
	if err = s.c.fail(ctx, err); err != nil && !isCode(err, CodeNotFound) {
		return err
	}
	return nil
}

// Close is Destroy with a 30 s deadline, for `defer sb.Close()`.
func (s *Sandbox) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Destroy(ctx)
}

func isCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Pause stops the sandbox where it is, keeping its processes and memory (native:
// the cgroup freezer; microvm: memory and device state to disk). While paused, execs
// and file calls fail with ErrPaused and the lifetime does not run.
func (s *Sandbox) Pause(ctx context.Context) error {
	_, err := s.c.rpc.Pause(ctx, &pb.SandboxRef{Id: s.id})
	return s.c.fail(ctx, err)
}

// Resume starts a paused sandbox again where it stopped.
func (s *Sandbox) Resume(ctx context.Context) error {
	_, err := s.c.rpc.Resume(ctx, &pb.SandboxRef{Id: s.id})
	return s.c.fail(ctx, err)
}

// Fork starts count copies of this paused sandbox, each a new sandbox of its own
// (destroy them yourself). Only the microvm provider can; others fail with
// ErrUnavailable naming the reason.
func (s *Sandbox) Fork(ctx context.Context, count int) ([]*Sandbox, error) {
	if count < 1 {
		return nil, invalid(fmt.Sprintf("fork count must be at least 1, not %d", count))
	}
	r, err := s.c.rpc.Fork(ctx, &pb.ForkRequest{Id: s.id, Count: uint32(count)})
	if err != nil {
		return nil, s.c.fail(ctx, err)
	}
	out := make([]*Sandbox, 0, len(r.Sandboxes))
	for _, i := range r.Sandboxes {
		out = append(out, &Sandbox{c: s.c, id: i.Id, info: infoOf(i), language: s.language})
	}
	return out, nil
}

// SnapshotInfo describes a named snapshot: a sandbox's saved state that new
// sandboxes start from.
type SnapshotInfo struct {
	Name     string
	Provider string
	// Source is the id of the sandbox it was taken of.
	Source    string
	CreatedAt time.Time
	// Bytes is the size of its saved memory and device state; SHA256 its digest,
	// checked before every start from it.
	Bytes  uint64
	SHA256 string
	Spec   json.RawMessage
}

func snapshotOf(s *pb.SnapshotInfo) SnapshotInfo {
	return SnapshotInfo{Name: s.Name, Provider: s.Provider, Source: s.Source,
		CreatedAt: time.UnixMilli(int64(s.CreatedAtMs)), Bytes: s.Bytes, SHA256: s.Sha256, Spec: json.RawMessage(s.SpecJson)}
}

// Snapshot keeps the sandbox's state (processes, memory, files) as the named snapshot
// name, which Client.FromSnapshot starts new sandboxes from; the sandbox goes on as
// it was. Only the microvm provider keeps snapshots; others fail with
// ErrUnavailable, a bad or taken name with ErrInvalidSpec.
func (s *Sandbox) Snapshot(ctx context.Context, name string) (SnapshotInfo, error) {
	r, err := s.c.rpc.Snapshot(ctx, &pb.SnapshotRequest{Id: s.id, Name: name})
	if err != nil {
		return SnapshotInfo{}, s.c.fail(ctx, err)
	}
	return snapshotOf(r), nil
}

// Snapshots is the caller's named snapshots.
func (c *Client) Snapshots(ctx context.Context) ([]SnapshotInfo, error) {
	r, err := c.rpc.SnapshotList(ctx, &pb.SnapshotListRequest{})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	out := make([]SnapshotInfo, 0, len(r.Snapshots))
	for _, s := range r.Snapshots {
		out = append(out, snapshotOf(s))
	}
	return out, nil
}

// RemoveSnapshot removes the named snapshot.
func (c *Client) RemoveSnapshot(ctx context.Context, name string) error {
	_, err := c.rpc.SnapshotRemove(ctx, &pb.SnapshotRef{Name: name})
	return c.fail(ctx, err)
}

// FromSnapshot starts a new sandbox from the named snapshot, after the daemon checks
// its digest (a changed file is ErrDenied and nothing starts). It ends with this
// process unless detach.
func (c *Client) FromSnapshot(ctx context.Context, name string, detach bool) (*Sandbox, error) {
	r, err := c.rpc.CreateFromSnapshot(ctx, &pb.CreateFromSnapshotRequest{
		Provider: c.provider, Name: name, OwnerPid: c.ownerPID(detach),
	})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return &Sandbox{c: c, id: r.Id, info: infoOf(r)}, nil
}

// SetNetwork replaces the egress policy of a sandbox created with one (Allow, Deny;
// credentials stay as created).
func (s *Sandbox) SetNetwork(ctx context.Context, n Network) error {
	v, err := n.json()
	if err != nil {
		return err
	}
	_, err = s.c.rpc.SetNetwork(ctx, &pb.SetNetworkRequest{SandboxId: s.id, NetworkJson: marshal(v)})
	return s.c.fail(ctx, err)
}

// EgressDenial is one refusal of a sandbox's egress policy.
type EgressDenial struct {
	// At is when (for a connection: its latest attempt).
	At time.Time `json:"-"`
	// Protocol is tcp, udp, dns (a lookup), tls (the SNI check) or http (the Host check).
	Protocol    string `json:"protocol"`
	Destination string `json:"destination"`
	// Port is 0 when the refusal has none.
	Port int `json:"port,omitempty"`
	// Name is the name asked for or resolved, when known.
	Name string `json:"name,omitempty"`
	// Rule says what decided: "not in the allowlist", "denylist: ...", ...
	Rule string `json:"rule"`
	// AtMs is At in unix milliseconds.
	AtMs uint64 `json:"at_ms"`
}

func denialsOf(ds []*pb.EgressDenial) []EgressDenial {
	out := make([]EgressDenial, 0, len(ds))
	for _, d := range ds {
		out = append(out, EgressDenial{At: time.UnixMilli(int64(d.AtMs)), AtMs: d.AtMs, Protocol: d.Protocol,
			Destination: d.Destination, Port: int(d.GetPort()), Name: d.GetName(), Rule: d.Rule})
	}
	return out
}

// EgressDenied is everything the sandbox's egress policy refused at or after since
// (the zero time: all that is still recorded). Poll it with the last At for a
// stream of events.
func (s *Sandbox) EgressDenied(ctx context.Context, since time.Time) ([]EgressDenial, error) {
	var ms uint64
	if !since.IsZero() {
		ms = uint64(since.UnixMilli())
	}
	r, err := s.c.rpc.EgressDenied(ctx, &pb.EgressDeniedRequest{SandboxId: s.id, SinceMs: ms})
	if err != nil {
		return nil, s.c.fail(ctx, err)
	}
	return denialsOf(r.Denied), nil
}
