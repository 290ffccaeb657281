package stockade

import (
	"context"
	"strings"
	"testing"
	"time"
)

// waitShown waits until the terminal's output holds want.
func waitShown(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	until := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(until) {
			t.Fatalf("the terminal never showed %q; it showed %q", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestATerminalTakesKeysASizeAndCtrlC(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	out := newSyncBuffer("")
	p, err := sb.Start(ctx, []string{"/bin/sh"}, ExecOptions{Stdout: out, Terminal: &TerminalSize{Rows: 30, Cols: 100}})
	if err != nil {
		t.Fatal(err)
	}
	// Each check prints what its typed (and echoed) line does not hold.
	typed := func(keys, want string) {
		t.Helper()
		if _, err := p.Write([]byte(keys)); err != nil {
			t.Fatal(err)
		}
		waitShown(t, out, want)
	}
	typed("test -t 0 && echo tty-$((1+1))\n", "tty-2")
	typed("stty size\n", "30 100")
	if err := p.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	typed("stty size\n", "40 120")
	if _, err := p.Write([]byte("sleep 60; echo slept-$((4+4))\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := p.Write([]byte("\x03")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	typed("echo after-$((3+4))\n", "after-7")
	if _, err := p.Write([]byte("exit 6\n")); err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 6 || strings.Contains(out.String(), "slept-8") {
		t.Fatalf("exit %d; the terminal showed %q", r.ExitCode, out.String())
	}
	if err := p.Resize(0, 10); !isCode(err, CodeInvalidSpec) {
		t.Fatalf("a size of 0 rows: %v", err)
	}
	if _, err := sb.Exec(ctx, []string{"/bin/true"}, ExecOptions{Terminal: &TerminalSize{Rows: 2, Cols: 2}}); !isCode(err, CodeInvalidSpec) {
		t.Fatalf("Exec with a terminal: %v", err)
	}
}
