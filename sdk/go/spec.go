package stockade

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Workspace is where Spec.Workspace is mounted, and the working directory then.
const Workspace = "/work"

// Spec describes a sandbox. The zero value is the secure default: no network, a
// read-only root, 64 MiB /tmp, 512 MiB of memory, one CPU, 64 processes, a 300 s
// lifetime, seccomp and landlock on, uid 1000. Every opt-out is a field of its own.
// The daemon validates the values and lists every problem at once (ErrInvalidSpec).
type Spec struct {
	// Image is an OCI image for the root (default: read-only views of the host's /usr).
	Image string
	// Language (python, javascript, typescript, ruby, php, perl, lua, r, bash, sh, zsh)
	// picks the root its interpreter comes from when Image is empty: the host's when
	// installed, else the language's image. It is also RunCode's default language.
	Language string
	// Network is outbound access (default none).
	Network Network
	// Writable gives a writable root, discarded at the end (default: only /tmp is).
	Writable bool
	// Timeout is the sandbox's lifetime, in whole seconds rounded up (default 300 s):
	// at its end everything is killed.
	Timeout time.Duration
	// IdleTimeout ends the sandbox after this long without execs or file calls.
	IdleTimeout time.Duration
	// Memory is the memory limit, such as "256m" or "1g" (default "512m"; no swap).
	Memory string
	// CPUs is the CPU quota (default 1).
	CPUs float64
	// Pids is the process and thread limit (default 64).
	Pids int
	// TmpSize is the size of /tmp, such as "64m" (the default).
	TmpSize string
	// Env is set in every exec (the environment is otherwise PATH, HOME and LANG).
	Env map[string]string
	// Mounts are host paths made visible inside, read-only unless Writable.
	Mounts []Mount
	// Workspace is a host directory mounted at /work, the working directory then;
	// read-only unless WorkspaceWritable.
	Workspace         string
	WorkspaceWritable bool
	// Workdir is the working directory of execs (default /tmp, or /work with a workspace).
	Workdir string
	// User is the identity of the code inside (default 1000:1000).
	User *User
	// Hostname inside (default "sandbox").
	Hostname string
	// NoSeccomp and NoLandlock turn those layers off (an explicit, reported opt-out).
	NoSeccomp  bool
	NoLandlock bool
	// Labels are free-form, for the caller's bookkeeping.
	Labels map[string]string

	// Provider is the daemon's provider that runs the sandbox (default: the daemon's
	// default, or the Client's).
	Provider string
	// Detach keeps the sandbox after this process exits. By default a sandbox made
	// over the daemon's unix socket is destroyed when this process dies.
	Detach bool
	// NoPool creates a fresh sandbox even when a warm pool of this spec exists.
	NoPool bool
}

// Mount is a host path visible inside the sandbox.
type Mount struct {
	Host     string `json:"host"`
	Target   string `json:"target"`
	Writable bool   `json:"writable"`
}

// User is a uid and gid inside the sandbox.
type User struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Network is a sandbox's outbound access. The zero value is none (loopback only).
// All opens the public internet (never the host's own networks); Allow makes an egress
// allowlist (`pypi.org`, `*.pythonhosted.org:443`, `10.1.2.0/24:5432`, ...), names
// resolving only through Stockade's resolver and refusals reported as EgressDenial;
// Deny wins over Allow.
type Network struct {
	All         bool
	Allow       []string
	Deny        []string
	Credentials []Credential
}

// Credential is a secret bound to a host: the egress proxy, outside the sandbox, sets
// Header: Value on HTTPS requests to Host; the sandbox sees only a placeholder in Env.
type Credential struct {
	// Host is a plain name the allowlist opens on TCP, such as api.openai.com.
	Host string `json:"host"`
	// Header defaults to Authorization.
	Header string `json:"header,omitempty"`
	// Value is the secret, such as "Bearer sk-...".
	Value string `json:"value"`
	// Env names the variable that holds the placeholder inside, such as OPENAI_API_KEY.
	Env string `json:"env,omitempty"`
}

// AllowOnly is an egress allowlist of entries.
func AllowOnly(entries ...string) Network { return Network{Allow: entries} }

// json is the spec's `network` value.
func (n Network) json() (any, error) {
	policy := len(n.Allow) > 0 || len(n.Deny) > 0 || len(n.Credentials) > 0
	if n.All && policy {
		return nil, invalid("network: All opens the whole public internet; leave Allow, Deny and Credentials empty with it, or drop All for an allowlist")
	}
	if n.All {
		return "egress", nil
	}
	if !policy {
		return "none", nil
	}
	out := map[string]any{"allow": nonNil(n.Allow), "deny": nonNil(n.Deny)}
	if len(n.Credentials) > 0 {
		out["credentials"] = n.Credentials
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// specJSON is the spec as the daemon's JSON (the schema of `stockade create --spec`).
func (s Spec) specJSON() (map[string]any, error) {
	var problems []string
	if s.Timeout < 0 || s.IdleTimeout < 0 {
		problems = append(problems, "Timeout and IdleTimeout must not be negative")
	}
	if s.CPUs < 0 || s.Pids < 0 {
		problems = append(problems, "CPUs and Pids must not be negative")
	}
	network, err := s.Network.json()
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, invalid("invalid sandbox spec: " + strings.Join(problems, "; "))
	}
	mounts := append([]Mount{}, s.Mounts...)
	var workdir any
	if s.Workdir != "" {
		workdir = s.Workdir
	}
	if s.Workspace != "" {
		abs, err := filepath.Abs(s.Workspace)
		if err != nil {
			return nil, invalid(fmt.Sprintf("workspace %q: %v", s.Workspace, err))
		}
		mounts = append(mounts, Mount{Host: abs, Target: Workspace, Writable: s.WorkspaceWritable})
		if workdir == nil {
			workdir = Workspace
		}
	}
	timeout := int64(300)
	if s.Timeout > 0 {
		timeout = seconds(s.Timeout)
	}
	var idle any
	if s.IdleTimeout > 0 {
		idle = seconds(s.IdleTimeout)
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	cpus := s.CPUs
	if cpus == 0 {
		cpus = 1
	}
	pids := s.Pids
	if pids == 0 {
		pids = 64
	}
	var image any
	if s.Image != "" {
		image = s.Image
	}
	spec := map[string]any{
		"image":             image,
		"network":           network,
		"writable":          s.Writable,
		"timeout_secs":      timeout,
		"idle_timeout_secs": idle,
		"limits": map[string]any{
			"memory_bytes": or(s.Memory, "512m"),
			"cpus":         cpus,
			"pids":         pids,
			"tmp_bytes":    or(s.TmpSize, "64m"),
		},
		"env":       nonNilMap(s.Env),
		"mounts":    mounts,
		"workdir":   workdir,
		"hardening": map[string]any{"seccomp": !s.NoSeccomp, "landlock": !s.NoLandlock},
		"labels":    nonNilMap(s.Labels),
	}
	if s.User != nil {
		spec["user"] = s.User
	}
	if s.Hostname != "" {
		spec["hostname"] = s.Hostname
	}
	return spec, nil
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only maps, strings, numbers and the types above: cannot fail.
		panic(fmt.Sprintf("stockade: cannot encode %T: %v", v, err))
	}
	return string(b)
}
