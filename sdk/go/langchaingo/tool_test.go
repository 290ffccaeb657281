package langchaingo

// The tool against a real daemon (started as the core module's tests start one):
// called directly, through the default client, and by a langchaingo agent executor
// driving it from a scripted model.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	stockade "github.com/stockade-dev/stockade/sdk/go"
	"github.com/stockade-dev/stockade/sdk/go/internal/testdaemon"
	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms/fake"
	"github.com/tmc/langchaingo/schema"
	"github.com/tmc/langchaingo/tools"
)

var daemonAddr, problem string

func TestMain(m *testing.M) {
	os.Unsetenv("STOCKADE_HOST")
	cli, err := stockade.FindCLI("")
	problem = testdaemon.Problem(cli, err)
	var d *testdaemon.Daemon
	if problem == "" {
		if d, err = testdaemon.Start(cli); err != nil {
			problem = err.Error()
		} else {
			daemonAddr = d.Addr
		}
	}
	if problem != "" && os.Getenv("CI") != "" {
		fmt.Fprintf(os.Stderr, "FAIL: %s\n", problem)
		os.Exit(1)
	}
	code := m.Run()
	if d != nil {
		d.Stop()
	}
	os.Exit(code)
}

func client(t *testing.T) *stockade.Client {
	t.Helper()
	if problem != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(problem)
		}
		t.Skip(problem)
	}
	c, err := stockade.Connect(context.Background(), stockade.Options{Host: daemonAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func decode(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("the tool returned %q: %v", out, err)
	}
	return m
}

func TestTheToolDescribesItself(t *testing.T) {
	var tool tools.Tool = RunCode{DefaultLanguage: "python"}
	if tool.Name() != "run_code" {
		t.Fatal(tool.Name())
	}
	for _, part := range []string{stockade.ToolDescription, `{"language"`, "typescript", "Plain code is run as python"} {
		if !strings.Contains(tool.Description(), part) {
			t.Errorf("description lacks %q: %s", part, tool.Description())
		}
	}
}

func TestCallRunsTheCodeInASandbox(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	out, err := RunCode{Client: c}.Call(ctx, `{"language": "python", "code": "print(6 * 7)"}`)
	if err != nil {
		t.Fatal(err)
	}
	if m := decode(t, out); m["ok"] != true || m["stdout"] != "42\n" || m["exit_code"] != 0.0 {
		t.Fatalf("%v", m)
	}
	// Plain code, run as the default language.
	out, _ = RunCode{Client: c, DefaultLanguage: "bash"}.Call(ctx, "echo plain; exit 2")
	if m := decode(t, out); m["ok"] != false || m["stdout"] != "plain\n" || m["exit_code"] != 2.0 {
		t.Fatalf("plain code: %v", m)
	}
	// Plain code without a default language: a failed result that says how to call it.
	out, err = RunCode{Client: c}.Call(ctx, "print(1)")
	if m := decode(t, out); err != nil || m["ok"] != false || m["error"].(map[string]any)["code"] != "invalid_spec" {
		t.Fatalf("plain code without a default: %v %v", m, err)
	}
	// Without a Client, the default one from the environment.
	t.Setenv("STOCKADE_HOST", daemonAddr)
	out, _ = RunCode{}.Call(ctx, `{"language": "sh", "code": "echo default"}`)
	if m := decode(t, out); m["stdout"] != "default\n" {
		t.Fatalf("default client: %v", m)
	}
	// A cancelled context is the one error.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (RunCode{Client: c}).Call(done, `{"language": "sh", "code": "true"}`); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestALangchaingoAgentCallsTheTool(t *testing.T) {
	c := client(t)
	llm := fake.NewFakeLLM([]string{
		"Thought: I should compute it in the sandbox.\nAction: run_code\n" +
			`Action Input: {"language": "python", "code": "print(6 * 7)"}`,
		"Thought: I know it now.\nFinal Answer: 42",
	})
	agent := agents.NewOneShotAgent(llm, []tools.Tool{RunCode{Client: c}})
	executor := agents.NewExecutor(agent, agents.WithReturnIntermediateSteps())
	out, err := chains.Call(context.Background(), executor, map[string]any{"input": "What is 6 * 7?"})
	if err != nil {
		t.Fatal(err)
	}
	steps, _ := out["intermediateSteps"].([]schema.AgentStep)
	if len(steps) != 1 || steps[0].Action.Tool != "run_code" {
		t.Fatalf("steps %+v", out)
	}
	if m := decode(t, steps[0].Observation); m["ok"] != true || m["stdout"] != "42\n" {
		t.Fatalf("the agent's observation: %v", m)
	}
	if out["output"] != "42" {
		t.Fatalf("output %v", out["output"])
	}
}
