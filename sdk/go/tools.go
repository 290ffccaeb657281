package stockade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The run_code tool for agents: its JSON schemas for Anthropic and OpenAI tool
// calling (the same names and schema as the Python and TypeScript SDKs ship) and
// HandleToolCall, which runs a call's arguments. Every call runs in a fresh sandbox
// with the secure defaults, destroyed afterwards.

// ToolName is the tool's name.
const ToolName = "run_code"

// ToolDescription is the tool's description for the model.
const ToolDescription = "Run a snippet of code in a secure, isolated sandbox (no network, read-only " +
	"filesystem except /tmp, memory and CPU limits) and return its exit code, stdout " +
	"and stderr. Print what you want to see."

// RunCodeSchema is the JSON schema of the tool's arguments, its language enum the
// languages given (see Client.AvailableLanguages for those that run now).
func RunCodeSchema(languages []string) map[string]any {
	if languages == nil {
		languages = []string{}
	}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"language": map[string]any{"type": "string", "enum": languages, "description": "Language of the code."},
			"code":     map[string]any{"type": "string", "description": "The code to run."},
		},
		"required":             []string{"language", "code"},
		"additionalProperties": false,
	}
}

// AnthropicTool is the tool definition for Anthropic's Messages API (`tools: [...]`).
func AnthropicTool(languages []string) map[string]any {
	return map[string]any{"name": ToolName, "description": ToolDescription, "input_schema": RunCodeSchema(languages)}
}

// OpenAITool is the tool definition for OpenAI's Chat Completions API (api "chat")
// or the Responses API (api "responses": the function's fields at the top level).
func OpenAITool(api string, languages []string) (map[string]any, error) {
	fn := map[string]any{"name": ToolName, "description": ToolDescription, "parameters": RunCodeSchema(languages), "strict": true}
	switch api {
	case "chat", "":
		return map[string]any{"type": "function", "function": fn}, nil
	case "responses":
		fn["type"] = "function"
		return fn, nil
	}
	return nil, invalid(fmt.Sprintf("api must be \"chat\" or \"responses\", not %q", api))
}

// ToolResult is what the tool returns. Its JSON is the Python SDK's: the command's
// outcome (`ok` is exit 0 within the deadline: `ok`, `exit_code`, `signal`, `stdout`,
// `stderr`, `timed_out`, `oom_killed`, `truncated`, `stdout_dropped_bytes`,
// `stderr_dropped_bytes`, `duration_ms`, `egress_denied`), or `{"ok": false,
// "error": {"code", "message"}}` when the sandbox could not run it, so the agent run
// goes on.
type ToolResult struct {
	OK bool
	// Result is the outcome; nil when Error is set.
	Result *Result
	Error  *ToolError
}

// ToolError is a ToolResult's failure.
type ToolError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// MarshalJSON writes the shape described at ToolResult.
func (t ToolResult) MarshalJSON() ([]byte, error) {
	if t.Error != nil || t.Result == nil {
		e := t.Error
		if e == nil {
			e = &ToolError{Code: string(CodeInternal), Message: "no result"}
		}
		return json.Marshal(map[string]any{"ok": false, "error": e})
	}
	r := t.Result
	var signal any
	if r.Signal != 0 {
		signal = r.Signal
	}
	denied := r.EgressDenied
	if denied == nil {
		denied = []EgressDenial{}
	}
	return json.Marshal(map[string]any{
		"ok": t.OK, "exit_code": r.ExitCode, "signal": signal,
		"stdout": string(r.Stdout), "stderr": string(r.Stderr),
		"timed_out": r.TimedOut, "oom_killed": r.OOMKilled, "truncated": r.Truncated(),
		"stdout_dropped_bytes": r.StdoutDropped, "stderr_dropped_bytes": r.StderrDropped,
		"duration_ms": r.Duration.Milliseconds(), "egress_denied": denied,
	})
}

// JSON is the result as a JSON string (what a tool call returns to the model).
func (t ToolResult) JSON() string { return marshal(t) }

// FailedToolResult is the ToolResult of a call that could not run: err's code
// (unavailable for an error that has none) and message.
func FailedToolResult(err error) ToolResult {
	var se *Error
	if errors.As(err, &se) {
		return ToolResult{Error: &ToolError{Code: string(se.Code), Message: se.Message}}
	}
	code := CodeUnavailable
	if errors.Is(err, context.DeadlineExceeded) {
		code = CodeTimeout
	}
	return ToolResult{Error: &ToolError{Code: string(code), Message: err.Error()}}
}

// ToolOptions are the options of the tool's calls.
type ToolOptions struct {
	// Timeout is each call's deadline (default 30 s).
	Timeout time.Duration
	// Spec is the sandbox of each call (its Language is the call's).
	Spec Spec
}

// RunCodeTool runs code of language for the tool; a sandbox problem is a failed
// ToolResult, never an error.
func (c *Client) RunCodeTool(ctx context.Context, language, code string, opts ToolOptions) ToolResult {
	r, err := c.RunCode(ctx, language, code, RunOptions{Timeout: opts.Timeout, Spec: opts.Spec})
	if err != nil {
		return FailedToolResult(err)
	}
	return ToolResult{OK: r.OK(), Result: r}
}

// HandleToolCall runs a tool call's arguments: the JSON object the model sent
// (`{"language": ..., "code": ...}`). Malformed arguments are a failed ToolResult
// with code invalid_spec.
func (c *Client) HandleToolCall(ctx context.Context, arguments []byte, opts ToolOptions) ToolResult {
	var args struct {
		Language *string `json:"language"`
		Code     *string `json:"code"`
	}
	if err := json.Unmarshal(arguments, &args); err != nil {
		return ToolResult{Error: &ToolError{Code: string(CodeInvalidSpec), Message: "bad tool arguments: " + err.Error()}}
	}
	if args.Language == nil || args.Code == nil {
		return ToolResult{Error: &ToolError{Code: string(CodeInvalidSpec), Message: "bad tool arguments: language and code must be strings"}}
	}
	return c.RunCodeTool(ctx, *args.Language, *args.Code, opts)
}

// HandleToolCall runs a tool call's arguments with the Default client; when no
// daemon is usable, the result says so.
func HandleToolCall(ctx context.Context, arguments []byte, opts ToolOptions) ToolResult {
	c, err := Default(ctx)
	if err != nil {
		return FailedToolResult(err)
	}
	return c.HandleToolCall(ctx, arguments, opts)
}
