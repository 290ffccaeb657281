package stockade

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/stockade-dev/stockade/sdk/go/pb"
)

// MaxMessageBytes is the largest message either side accepts (files move up to
// 32 MiB in one call).
const MaxMessageBytes = 64 << 20

// Options say which daemon a Client uses and how. Every field is optional.
type Options struct {
	// Host is the daemon's address (see Address); default $STOCKADE_HOST, else the
	// default socket (DefaultSocket), where a daemon is started when none answers.
	Host string
	// Token is sent as a bearer token on every call; default $STOCKADE_TOKEN.
	Token string
	// TLSCA is a PEM file of the CA(s) a TLS daemon's certificate must chain to;
	// default $STOCKADE_TLS_CA, else the system's roots.
	TLSCA string
	// Provider runs the sandboxes this client creates (default: the daemon's).
	Provider string
	// NoAutostart refuses to start a daemon when none answers on the default socket.
	NoAutostart bool
	// CLI is the stockade binary that serves a daemon started on demand; default
	// $STOCKADE_CLI, else `stockade` on PATH.
	CLI string
}

// Client is a connection to a Stockade daemon. It is safe for concurrent use; one
// Client per program is enough.
type Client struct {
	conn     *grpc.ClientConn
	rpc      pb.StockadeClient
	addr     Address
	provider string
	fromEnv  bool // the address came from STOCKADE_HOST or Options.Host
	cli      string

	langMu   sync.Mutex
	langRows []LanguageSupport
	langAt   time.Time
}

func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

// Connect connects to the daemon the options and the environment name: Host (or
// STOCKADE_HOST), an error when it does not answer; else the default socket when a
// daemon answers there; else a daemon started on demand on the default socket
// (`stockade serve`, as the caller: rootless when the caller is not root), which
// keeps running for later programs.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if opts.Token == "" {
		opts.Token = env("STOCKADE_TOKEN")
	}
	if opts.TLSCA == "" {
		opts.TLSCA = env("STOCKADE_TLS_CA")
	}
	if opts.CLI == "" {
		opts.CLI = env("STOCKADE_CLI")
	}
	host := opts.Host
	if host == "" {
		host = env("STOCKADE_HOST")
	}
	if host != "" {
		addr, err := ParseAddress(host)
		if err != nil {
			return nil, err
		}
		c, err := dial(addr, opts)
		if err != nil {
			return nil, err
		}
		c.fromEnv = true
		if err := c.ping(ctx); err != nil {
			c.conn.Close()
			return nil, err
		}
		return c, nil
	}
	addr := Address{Unix: DefaultSocket()}
	if _, err := os.Stat(addr.Unix); err == nil {
		c, err := dial(addr, opts)
		if err != nil {
			return nil, err
		}
		err = c.ping(ctx)
		if err == nil {
			return c, nil
		}
		c.conn.Close()
		if !errors.Is(err, ErrUnavailable) {
			return nil, err // it answered, and refused (a token, a context that ended)
		}
		// A stale socket of a daemon that is gone: start one.
	}
	if opts.NoAutostart {
		return nil, newError(CodeUnavailable, fmt.Sprintf("stockaded at %s is unavailable: no daemon answers "+
			"(fix: start one with `stockade serve`, set STOCKADE_HOST, or leave Options.NoAutostart false)", addr))
	}
	if err := startDaemon(ctx, addr.Unix, opts.CLI); err != nil {
		return nil, err
	}
	c, err := dial(addr, opts)
	if err != nil {
		return nil, err
	}
	if err := c.ping(ctx); err != nil {
		c.conn.Close()
		return nil, err
	}
	return c, nil
}

// dial makes the connection (grpc connects lazily, at the first call).
func dial(addr Address, opts Options) (*Client, error) {
	dialOpts := []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
	}
	var target string
	if addr.Unix != "" {
		target = "unix://" + addr.Unix
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		target = "passthrough:///" + addr.Authority()
		if addr.UsesTLS(opts.TLSCA != "") {
			cfg := &tls.Config{ServerName: addr.Host, MinVersion: tls.VersionTLS12}
			if opts.TLSCA != "" {
				pem, err := os.ReadFile(opts.TLSCA)
				if err != nil {
					return nil, invalid(fmt.Sprintf("cannot read the TLS CA file %s (%v); give a PEM file with Options.TLSCA or STOCKADE_TLS_CA", opts.TLSCA, err))
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return nil, invalid(fmt.Sprintf("the TLS CA file %s holds no PEM certificate; give a PEM file with Options.TLSCA or STOCKADE_TLS_CA", opts.TLSCA))
				}
				cfg.RootCAs = pool
			}
			dialOpts = append(dialOpts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		} else {
			dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}
	}
	if tok := strings.TrimSpace(opts.Token); tok != "" {
		for _, r := range tok {
			if r < 0x20 || r > 0x7e {
				return nil, invalid("the token has characters that cannot be sent in a header; use printable ASCII")
			}
		}
		bearer := "Bearer " + tok
		dialOpts = append(dialOpts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", bearer), method, req, reply, cc, o...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(metadata.AppendToOutgoingContext(ctx, "authorization", bearer), desc, cc, method, o...)
			}))
	}
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, invalid(fmt.Sprintf("daemon address %s: %v", addr, err))
	}
	return &Client{conn: conn, rpc: pb.NewStockadeClient(conn), addr: addr, provider: opts.Provider, cli: opts.CLI}, nil
}

// ping checks that the daemon answers (and accepts the token).
func (c *Client) ping(ctx context.Context) error {
	_, err := c.Health(ctx)
	return err
}

// Close closes the connection. Sandboxes live on (each ends with its lifetime, or
// with this process unless created with Spec.Detach).
func (c *Client) Close() error { return c.conn.Close() }

// Address is where the daemon is.
func (c *Client) Address() Address { return c.addr }

// Health is what the daemon says of itself.
type Health struct {
	Version string
	// Tenant is the tenant the caller's token (or uid) maps to.
	Tenant    string
	Uptime    time.Duration
	Providers []string
}

// Health asks the daemon for its version, the caller's tenant and its providers.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	r, err := c.rpc.Health(ctx, &pb.HealthRequest{})
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	return &Health{Version: r.Version, Tenant: r.Tenant, Uptime: time.Duration(r.UptimeMs) * time.Millisecond, Providers: r.Providers}, nil
}

var (
	defaultMu     sync.Mutex
	defaultClient *Client
)

// Default is the Client of the package-level functions: connected from the
// environment (see Connect) at first use and kept; a failed connection is retried at
// the next call.
func Default(ctx context.Context) (*Client, error) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultClient != nil {
		return defaultClient, nil
	}
	c, err := Connect(ctx, Options{})
	if err != nil {
		return nil, err
	}
	defaultClient = c
	return c, nil
}

// Create creates a sandbox with the Default client (see Client.Create).
func Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	c, err := Default(ctx)
	if err != nil {
		return nil, err
	}
	return c.Create(ctx, spec)
}

// RunCode runs code once in a fresh sandbox with the Default client (see Client.RunCode).
func RunCode(ctx context.Context, language, code string, opts ...RunOptions) (*Result, error) {
	c, err := Default(ctx)
	if err != nil {
		return nil, err
	}
	return c.RunCode(ctx, language, code, opts...)
}
