package stockade

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Security says whether a TCP address asks for TLS.
type Security int

const (
	// SecurityAuto (`tcp://` or no scheme): TLS with a CA file, or off loopback.
	SecurityAuto Security = iota
	// SecurityTLS (`https://`): always TLS.
	SecurityTLS
	// SecurityPlain (`http://`): always plain text.
	SecurityPlain
)

// Address is where a daemon listens, spelled as `STOCKADE_HOST` and the daemon's
// `--listen` spell it: `unix:///path`, `unix:/path` or `/path` (a unix socket);
// `tcp://host:port`, `tcp:host:port` or `host:port`; `https://host:port`;
// `http://host:port`. A host is a name, an IPv4 address or a bracketed IPv6 address.
type Address struct {
	// Unix is the socket path of a unix address, else empty.
	Unix string
	// Host and Port of a TCP address (an IPv6 host without brackets).
	Host string
	Port int
	// Security of a TCP address.
	Security Security
}

func badAddress(text, why string) error {
	return invalid(fmt.Sprintf("daemon address %q %s; write unix:///path/to.sock, /path/to.sock, "+
		"tcp://host:port, host:port, https://host:port or http://host:port", text, why))
}

// ParseAddress parses any of the spellings of Address.
func ParseAddress(text string) (Address, error) {
	t := strings.TrimSpace(text)
	for _, prefix := range []string{"unix://", "unix:", ""} {
		p, ok := strings.CutPrefix(t, prefix)
		if !ok || (prefix == "" && !strings.HasPrefix(t, "/")) {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return Address{}, badAddress(text, "must name an absolute socket path")
		}
		return Address{Unix: p}, nil
	}
	rest, security := t, SecurityAuto
	switch {
	case strings.HasPrefix(t, "https://"):
		rest, security = t[len("https://"):], SecurityTLS
	case strings.HasPrefix(t, "http://"):
		rest, security = t[len("http://"):], SecurityPlain
	case strings.HasPrefix(t, "tcp://"):
		rest = t[len("tcp://"):]
	case strings.HasPrefix(t, "tcp:"):
		rest = t[len("tcp:"):]
	case strings.Contains(t, "://"):
		return Address{}, badAddress(text, "has a scheme the daemon does not speak")
	}
	rest = strings.TrimSuffix(rest, "/")
	if strings.Contains(rest, "/") {
		return Address{}, badAddress(text, "has a path after host:port")
	}
	i := strings.LastIndex(rest, ":")
	if i < 0 {
		return Address{}, badAddress(text, "has no port")
	}
	host, portText := rest[:i], rest[i+1:]
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return Address{}, badAddress(text, "has a port that is not a number from 1 to 65535")
	}
	if port == 0 {
		return Address{}, badAddress(text, "has port 0")
	}
	if v6, ok := strings.CutPrefix(host, "["); ok {
		v6, ok = strings.CutSuffix(v6, "]")
		if ip := net.ParseIP(v6); !ok || ip == nil || !strings.Contains(v6, ":") {
			return Address{}, badAddress(text, "has a bracketed host that is not an IPv6 address")
		}
		host = v6
	} else if strings.Contains(host, ":") {
		return Address{}, badAddress(text, "has an IPv6 address without brackets ([::1]:port)")
	}
	if host == "" {
		return Address{}, badAddress(text, "has no host")
	}
	return Address{Host: host, Port: int(port), Security: security}, nil
}

// IsLoopback reports whether the address stays on this machine (a unix socket,
// `localhost`, or a loopback IP address).
func (a Address) IsLoopback() bool {
	if a.Unix != "" {
		return true
	}
	if strings.EqualFold(a.Host, "localhost") {
		return true
	}
	ip := net.ParseIP(a.Host)
	return ip != nil && ip.IsLoopback()
}

// UsesTLS reports whether a client speaks TLS to the address, given whether it has a
// CA file: `https://` always, `http://` never, otherwise with a CA file or off loopback.
func (a Address) UsesTLS(hasCA bool) bool {
	if a.Unix != "" {
		return false
	}
	switch a.Security {
	case SecurityTLS:
		return true
	case SecurityPlain:
		return false
	}
	return hasCA || !a.IsLoopback()
}

// Authority is `host:port`, an IPv6 host in brackets; empty for a unix socket.
func (a Address) Authority() string {
	if a.Unix != "" {
		return ""
	}
	return net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
}

// String spells the address so that ParseAddress reads it back.
func (a Address) String() string {
	if a.Unix != "" {
		return "unix://" + a.Unix
	}
	scheme := map[Security]string{SecurityAuto: "tcp", SecurityTLS: "https", SecurityPlain: "http"}[a.Security]
	return scheme + "://" + a.Authority()
}

// DefaultSocket is the daemon's default socket, as the Rust client and `stockade
// serve` pick it: /run/stockaded.sock for root, else $XDG_RUNTIME_DIR/stockaded.sock,
// else /tmp/stockaded-UID.sock.
func DefaultSocket() string {
	uid := os.Geteuid()
	if uid == 0 {
		return "/run/stockaded.sock"
	}
	if d, ok := os.LookupEnv("XDG_RUNTIME_DIR"); ok {
		return filepath.Join(d, "stockaded.sock")
	}
	return fmt.Sprintf("/tmp/stockaded-%d.sock", uid)
}
