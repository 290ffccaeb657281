// Package langchaingo is Stockade's run_code tool for langchaingo agents
// (github.com/tmc/langchaingo/tools.Tool): each call runs the model's code in a
// fresh sandbox with the secure defaults, destroyed afterwards.
package langchaingo

import (
	"context"
	"encoding/json"
	"strings"

	stockade "github.com/stockade-dev/stockade/sdk/go"
	"github.com/tmc/langchaingo/tools"
)

// RunCode is the run_code tool. Its input is the JSON object of the tool's schema,
// `{"language": "python", "code": "print(1)"}` (what function-calling agents send);
// input that is not such an object is run as code of DefaultLanguage when set. Its
// output is the JSON of stockade.ToolResult; a sandbox problem is a failed result,
// not an error, so the agent run goes on.
type RunCode struct {
	// Client runs the sandboxes (default: stockade.Default).
	Client *stockade.Client
	// Options apply to every call (deadline, sandbox spec).
	Options stockade.ToolOptions
	// DefaultLanguage runs input that is plain code (empty: such input is refused
	// with a result saying how to call the tool).
	DefaultLanguage string
}

var _ tools.Tool = RunCode{}

// Name is the tool's name, run_code.
func (RunCode) Name() string { return stockade.ToolName }

// Description tells the model what the tool does and how to call it.
func (t RunCode) Description() string {
	d := stockade.ToolDescription + ` Input: a JSON object {"language": "<language>", "code": "<the code>"} ` +
		`with language one of ` + strings.Join(stockade.Languages, ", ") + `.`
	if t.DefaultLanguage != "" {
		d += " Plain code is run as " + t.DefaultLanguage + "."
	}
	return d
}

// Call runs the input and returns the JSON of its stockade.ToolResult. The error is
// non-nil only when ctx ended.
func (t RunCode) Call(ctx context.Context, input string) (string, error) {
	c := t.Client
	if c == nil {
		var err error
		if c, err = stockade.Default(ctx); err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return stockade.FailedToolResult(err).JSON(), nil
		}
	}
	args := []byte(strings.TrimSpace(input))
	var probe map[string]json.RawMessage
	if json.Unmarshal(args, &probe) != nil && t.DefaultLanguage != "" {
		args, _ = json.Marshal(map[string]string{"language": t.DefaultLanguage, "code": input})
	}
	r := c.HandleToolCall(ctx, args, t.Options)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return r.JSON(), nil
}
