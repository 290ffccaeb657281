package stockade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	stockade "github.com/stockade-dev/stockade/sdk/go"
)

func Example() {
	ctx := context.Background()
	sb, err := stockade.Create(ctx, stockade.Spec{Memory: "256m"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()
	r, err := sb.Exec(ctx, []string{"python3", "-c", "print(6 * 7)"}, stockade.ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(r.Stdout))
}

func ExampleSandbox_Start() {
	ctx := context.Background()
	sb, err := stockade.Create(ctx, stockade.Spec{})
	if err != nil {
		return
	}
	defer sb.Close()
	// Output streams to os.Stdout as it comes; stdin stays open until CloseStdin.
	p, err := sb.Start(ctx, []string{"sh", "-c", "read name; echo hello $name"}, stockade.ExecOptions{Stdout: os.Stdout})
	if err != nil {
		return
	}
	p.Write([]byte("gopher\n"))
	p.CloseStdin()
	p.Wait()
}

func ExampleClient_Attach() {
	ctx := context.Background()
	c, err := stockade.Connect(ctx, stockade.Options{})
	if err != nil {
		return
	}
	if _, err := c.Attach(ctx, "sb-000000000000"); errors.Is(err, stockade.ErrNotFound) {
		fmt.Println("no such sandbox")
	}
}

func ExampleClient_HandleToolCall() {
	ctx := context.Background()
	c, err := stockade.Connect(ctx, stockade.Options{})
	if err != nil {
		return
	}
	tool := stockade.AnthropicTool(stockade.Languages) // or c.AvailableLanguages(ctx)
	_ = tool                                           // in the request's tools: [...]
	// With the model's tool_use input:
	result := c.HandleToolCall(ctx, []byte(`{"language": "python", "code": "print(2 + 2)"}`), stockade.ToolOptions{})
	fmt.Println(result.JSON())
}
