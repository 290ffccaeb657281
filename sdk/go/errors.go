package stockade

import (
	"context"
	"errors"
	"io/fs"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code is one of Stockade's error codes: the same codes as the CLI's `--json` errors
// and the daemon's gRPC statuses.
type Code string

// The error codes.
const (
	CodeInvalidSpec   Code = "invalid_spec"
	CodeNotFound      Code = "not_found"
	CodeUnavailable   Code = "unavailable"
	CodeTimeout       Code = "timeout"
	CodeLimitExceeded Code = "limit_exceeded"
	CodePolicyDenied  Code = "policy_denied"
	CodeInternal      Code = "internal"
)

// Sentinels for errors.Is. Every *Error matches the sentinel of its code; some also
// match a narrower one (ErrGone, ErrPaused) and the io/fs error a local file
// operation would give (fs.ErrNotExist, fs.ErrExist, fs.ErrPermission).
var (
	// ErrInvalidSpec: the spec or request is invalid; the message lists every problem.
	ErrInvalidSpec = errors.New("stockade: invalid spec or request")
	// ErrNotFound: no such sandbox, session, snapshot, image or file.
	ErrNotFound = errors.New("stockade: not found")
	// ErrUnavailable: a daemon, provider or host feature is missing; the fix says what to do.
	ErrUnavailable = errors.New("stockade: unavailable")
	// ErrTimeout: an operation of Stockade's ran out of time (an exec's deadline is a
	// Result with TimedOut, not an error).
	ErrTimeout = errors.New("stockade: timed out")
	// ErrLimit: a quota or size limit was reached.
	ErrLimit = errors.New("stockade: limit exceeded")
	// ErrDenied: refused by the daemon's tokens, a policy or the sandbox's permissions.
	ErrDenied = errors.New("stockade: policy denied")
	// ErrInternal: a bug or an unexpected state in Stockade.
	ErrInternal = errors.New("stockade: internal error")
	// ErrGone: the sandbox ended (destroyed, lifetime over, killed) during the call.
	// Also an ErrUnavailable.
	ErrGone = errors.New("stockade: sandbox gone")
	// ErrPaused: the sandbox is paused; Resume it first. Also an ErrInvalidSpec.
	ErrPaused = errors.New("stockade: sandbox paused")
)

// Error is an error from Stockade: the daemon's code and message, unchanged.
type Error struct {
	// Code says what kind of error it is.
	Code Code
	// Message is for people: what happened, and usually what to do.
	Message string
	// Fix is the message's "(fix: ...)" part, when it has one.
	Fix string
	// Path is the path in the sandbox of a file error (not found, is a directory,
	// already exists), else empty.
	Path string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// The agent's fixed forms of file errors and of a sandbox that ended or is paused,
// each meaningful under its own code only (a path can never change an error's kind).
var (
	fileForm   = regexp.MustCompile(`(?s)^path (.+?) (not found$|is a directory; |already exists; )`)
	goneForm   = regexp.MustCompile(`^sandbox \S+ is gone: `)
	pausedForm = regexp.MustCompile(`^(invalid request: )?sandbox \S+ is paused; resume it first`)
)

// Is reports whether target is the sentinel of e's code, or a narrower sentinel or
// io/fs error that e's code and message form match.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInvalidSpec:
		return e.Code == CodeInvalidSpec
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrUnavailable:
		return e.Code == CodeUnavailable
	case ErrTimeout:
		return e.Code == CodeTimeout
	case ErrLimit:
		return e.Code == CodeLimitExceeded
	case ErrDenied, fs.ErrPermission:
		return e.Code == CodePolicyDenied
	case ErrInternal:
		return e.Code == CodeInternal
	case ErrGone:
		return e.Code == CodeUnavailable && goneForm.MatchString(e.Message)
	case ErrPaused:
		return e.Code == CodeInvalidSpec && pausedForm.MatchString(e.Message)
	case fs.ErrNotExist:
		return e.Code == CodeNotFound && e.fileKind() == "not found"
	case fs.ErrExist:
		return e.Code == CodeInvalidSpec && e.fileKind() == "already exists; "
	}
	return false
}

// IsDir reports whether e says a file operation met a directory.
func (e *Error) IsDir() bool { return e.Code == CodeInvalidSpec && e.fileKind() == "is a directory; " }

func (e *Error) fileKind() string {
	if m := fileForm.FindStringSubmatch(e.Message); m != nil {
		return m[2]
	}
	return ""
}

// newError makes an *Error of code and message, with its fix and file path.
func newError(code Code, message string) *Error {
	e := &Error{Code: code, Message: message}
	if i := strings.LastIndex(message, " (fix: "); i >= 0 && strings.HasSuffix(message, ")") {
		e.Fix = message[i+len(" (fix: ") : len(message)-1]
	}
	if m := fileForm.FindStringSubmatch(message); m != nil {
		e.Path = m[1]
	}
	return e
}

// codeOf is the Stockade code of a gRPC status code (a refused token is policy_denied).
func codeOf(c codes.Code) Code {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return CodeInvalidSpec
	case codes.NotFound:
		return CodeNotFound
	case codes.Unavailable:
		return CodeUnavailable
	case codes.DeadlineExceeded:
		return CodeTimeout
	case codes.ResourceExhausted:
		return CodeLimitExceeded
	case codes.PermissionDenied, codes.Unauthenticated:
		return CodePolicyDenied
	}
	return CodeInternal
}

// fail turns an RPC's error into the SDK's: the context's own error when ctx ended
// (errors.Is(err, context.Canceled) or context.DeadlineExceeded), else an *Error with
// the daemon's code and message; a connection that failed is unavailable, naming
// the daemon and what to do.
func (c *Client) fail(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	s, ok := status.FromError(err)
	if !ok {
		return newError(CodeInternal, err.Error())
	}
	if s.Code() == codes.Canceled && ctx.Err() == nil {
		if _, has := ctx.Deadline(); has && s.Message() == "Timeout expired" {
			// The daemon's end of our own deadline (grpc-timeout), which it can see
			// pass a moment before this process does.
			return context.DeadlineExceeded
		}
		// Not our cancellation: the connection went away under the call.
		return c.unreachable(s.Message())
	}
	if s.Code() == codes.Unavailable && isTransport(s.Message()) && isTLS(s.Message()) {
		return newError(CodePolicyDenied, "stockaded at "+c.addr.String()+" did not pass the TLS check ("+s.Message()+
			"); give the CA certificate that signed the daemon's certificate with Options.TLSCA or STOCKADE_TLS_CA, "+
			"and name the daemon by a host its certificate lists")
	}
	if s.Code() == codes.Unavailable && isTransport(s.Message()) {
		return c.unreachable(s.Message())
	}
	return newError(codeOf(s.Code()), s.Message())
}

// isTransport reports whether an UNAVAILABLE status was made by grpc-go from a failed
// or broken connection rather than sent by the daemon: grpc-go's own messages start
// with these, the daemon's never do.
func isTransport(msg string) bool {
	for _, m := range []string{"connection error: ", "error reading from server: ", "transport is closing",
		"the connection is draining", "connection closed before server preface received", "error reading server preface"} {
		if strings.HasPrefix(msg, m) {
			return true
		}
	}
	return false
}

func (c *Client) unreachable(why string) *Error {
	fix := "the daemon stopped or restarted; retry when it is back, or run `stockade serve`"
	if c.fromEnv {
		fix = "start it with `stockade serve --listen " + c.addr.String() + "`, or name another daemon " +
			"(Options.Host, STOCKADE_HOST; unset, the SDK uses the default socket and starts a daemon there)"
	}
	return newError(CodeUnavailable, "stockaded at "+c.addr.String()+" is unavailable: "+why+" (fix: "+fix+")")
}

// isTLS reports whether a failed connection failed in the TLS handshake.
func isTLS(msg string) bool {
	return strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:")
}

func invalid(msg string) *Error { return newError(CodeInvalidSpec, msg) }
