// Package stockade runs untrusted, AI-written code in Stockade sandboxes from Go,
// through the Stockade daemon's gRPC API.
//
//	sb, err := stockade.Create(ctx, stockade.Spec{})  // no network, read-only root, limits
//	if err != nil { ... }
//	defer sb.Close()
//	r, err := sb.Exec(ctx, []string{"python3", "-c", "print(6 * 7)"})
//
// The daemon is the one at STOCKADE_HOST (a unix socket, or TCP with TLS and the
// STOCKADE_TOKEN bearer token, its CA in STOCKADE_TLS_CA), else the one on the
// default socket (DefaultSocket); when none answers there, Connect starts one
// (`stockade serve`, the binary at STOCKADE_CLI or on PATH) as the caller, rootless
// when the caller is not root.
//
// Every call takes a context: cancelling it ends the call, and an exec's cancelled
// context kills the command and everything it started. Errors are *Error values
// with the daemon's code; match them with errors.Is against ErrNotFound, ErrDenied,
// ErrLimit, ErrUnavailable, ErrGone and the others, or io/fs errors for file calls.
//
// RunCodeSchema, AnthropicTool, OpenAITool and Client.HandleToolCall are the
// run_code tool for agents; the langchaingo module beside this one wraps it as a
// langchaingo tool.
package stockade
