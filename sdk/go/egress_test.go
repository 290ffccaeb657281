package stockade

// Egress policies: an allowlist refuses what it does not name at once and reports
// it (with the result and as events), and the policy is replaced live. Nothing here
// needs the internet: only refusals are checked.

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

const egressProbe = `
import socket
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("1.1.1.1", 53)); print("connected")
except OSError as e:
    print("refused", e)
try:
    socket.getaddrinfo("registry.npmjs.org", 443); print("resolved")
except socket.gaierror:
    print("nxdomain")
`

func TestEgressAllowlistRefusesAndReports(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb, err := c.Create(ctx, Spec{Language: "python", Network: AllowOnly("pypi.org")})
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("this host cannot run egress policies: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	start := time.Now().Add(-time.Second)
	r, err := sb.RunCode(ctx, "python", egressProbe, ExecOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out := string(r.Stdout); !strings.HasPrefix(out, "refused") || !strings.Contains(out, "nxdomain") {
		t.Fatalf("the allowlist let something through: %q %q", r.Stdout, r.Stderr)
	}
	has := func(ds []EgressDenial, proto, what string) bool {
		return slices.ContainsFunc(ds, func(d EgressDenial) bool {
			return d.Protocol == proto && (d.Destination == what || d.Name == what) && d.Rule != ""
		})
	}
	if !has(r.EgressDenied, "tcp", "1.1.1.1") || !has(r.EgressDenied, "dns", "registry.npmjs.org") {
		t.Fatalf("the result's refusals: %+v", r.EgressDenied)
	}
	events, err := sb.EgressDenied(ctx, start)
	if err != nil || !has(events, "tcp", "1.1.1.1") || !has(events, "dns", "registry.npmjs.org") {
		t.Fatalf("the sandbox's refusals: %+v %v", events, err)
	}
	for _, d := range events {
		if d.At.Before(start) {
			t.Errorf("refusal %+v is older than asked for", d)
		}
	}
	// Replaced live: 1.1.1.1:53 allowed, so connecting there is no longer refused
	// (whether it answers depends on this host's network, which is not tested).
	if err := sb.SetNetwork(ctx, AllowOnly("pypi.org", "1.1.1.1:53")); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	if _, err := sb.RunCode(ctx, "python", egressProbe, ExecOptions{Timeout: 60 * time.Second}); err != nil {
		t.Fatal(err)
	}
	later, err := sb.EgressDenied(ctx, since)
	if err != nil || has(later, "tcp", "1.1.1.1") || !has(later, "dns", "registry.npmjs.org") {
		t.Fatalf("after the new policy: %+v %v", later, err)
	}
	if err := sb.SetNetwork(ctx, AllowOnly("pypi.org:0")); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("a bad entry: %v", err)
	}
}
