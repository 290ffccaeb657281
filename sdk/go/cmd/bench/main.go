// Command bench measures the Go SDK against the same daemon as the Rust client:
// create + exec(/bin/true) + destroy, and the exec round trip in a held sandbox,
// p50 and p99 over N iterations from Go, then the same two operations measured by the
// Rust client (`stockade bench burst --mode one-shot|held`, one client) in the same
// run, and Go's overhead as the difference. Rounds alternate Go and Rust, so load that
// drifts during the run cancels out; the table shows medians over rounds.
//
//	go run ./cmd/bench [-n 100] [-rounds 3] [-host ADDR]
//
// Without -host (or STOCKADE_HOST) it starts a daemon of its own on a temporary socket
// (`stockade serve`, the binary at $STOCKADE_CLI or on PATH) and stops it at the end.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	stockade "github.com/stockade-dev/stockade/sdk/go"
)

func main() {
	n := flag.Int("n", 100, "iterations per operation and round")
	rounds := flag.Int("rounds", 3, "rounds, each Go then Rust")
	host := flag.String("host", os.Getenv("STOCKADE_HOST"), "the daemon (default: one started for the run)")
	flag.Parse()
	if err := run(*n, *rounds, *host); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// row is one operation's per-round percentiles from each side.
type row struct {
	name                   string
	goP50, goP99, goN      []float64
	rustP50, rustP99, rstN []float64
}

func run(n, rounds int, host string) error {
	if n < 1 || rounds < 1 {
		return fmt.Errorf("-n and -rounds must be at least 1")
	}
	cli, err := stockade.FindCLI("")
	if err != nil {
		return err
	}
	if host == "" {
		addr, stop, err := serve(cli)
		if err != nil {
			return err
		}
		defer stop()
		host = addr
	}
	ctx := context.Background()
	c, err := stockade.Connect(ctx, stockade.Options{Host: host})
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		return err
	}
	oneShot := &row{name: "create + exec(`/bin/true`) + destroy"}
	held := &row{name: "exec(`/bin/true`) round trip, held sandbox"}
	for r := 0; r < rounds; r++ {
		fmt.Fprintf(os.Stderr, "bench: round %d of %d\n", r+1, rounds)
		samples, elapsed, err := timed(n, func() error {
			sb, err := c.Create(ctx, stockade.Spec{})
			if err != nil {
				return err
			}
			if _, err := exec0(ctx, sb); err != nil {
				return err
			}
			return sb.Destroy(ctx)
		})
		if err != nil {
			return fmt.Errorf("one-shot: %w", err)
		}
		oneShot.add(samples)
		if err := oneShot.rust(cli, c.Address().String(), "one-shot", elapsed); err != nil {
			return err
		}
		sb, err := c.Create(ctx, stockade.Spec{})
		if err != nil {
			return err
		}
		samples, elapsed, err = timed(n, func() error { _, err := exec0(ctx, sb); return err })
		sb.Destroy(ctx)
		if err != nil {
			return fmt.Errorf("held: %w", err)
		}
		held.add(samples)
		if err := held.rust(cli, c.Address().String(), "held", elapsed); err != nil {
			return err
		}
		for _, x := range []*row{oneShot, held} {
			fmt.Fprintf(os.Stderr, "bench:   %s: p50 Go %.2f ms, Rust %.2f ms\n", x.name, x.goP50[r], x.rustP50[r])
		}
	}
	fmt.Printf("Go SDK vs Rust client (stockade bench burst, 1 client), daemon %s at %s, %d rounds x %d iterations; medians over rounds\n\n",
		h.Version, c.Address(), rounds, n)
	fmt.Println("| operation | Go n | Go p50 ms | Go p99 ms | Rust n | Rust p50 ms | Rust p99 ms | Go - Rust p50 ms | Go - Rust p99 ms |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range []*row{oneShot, held} {
		fmt.Printf("| %s | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f | %+.2f | %+.2f |\n", r.name,
			sum(r.goN), median(r.goP50), median(r.goP99), sum(r.rstN), median(r.rustP50), median(r.rustP99),
			median(r.goP50)-median(r.rustP50), median(r.goP99)-median(r.rustP99))
	}
	return nil
}

func exec0(ctx context.Context, sb *stockade.Sandbox) (*stockade.Result, error) {
	r, err := sb.Exec(ctx, []string{"/bin/true"})
	if err == nil && !r.OK() {
		err = fmt.Errorf("/bin/true exited %d: %s", r.ExitCode, r.Stderr)
	}
	return r, err
}

// timed runs op once to warm up, then n times; returns the samples in ms and the time.
func timed(n int, op func() error) ([]float64, time.Duration, error) {
	if err := op(); err != nil {
		return nil, 0, err
	}
	out := make([]float64, 0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := op(); err != nil {
			return nil, 0, err
		}
		out = append(out, float64(time.Since(t).Microseconds())/1000)
	}
	return out, time.Since(start), nil
}

// pct is the nearest-rank percentile p (0..1) of samples, as the Rust bench computes it.
func pct(samples []float64, p float64) float64 {
	s := slices.Clone(samples)
	sort.Float64s(s)
	rank := int(math.Ceil(p * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func (r *row) add(samples []float64) {
	r.goP50 = append(r.goP50, pct(samples, 0.5))
	r.goP99 = append(r.goP99, pct(samples, 0.99))
	r.goN = append(r.goN, float64(len(samples)))
}

// rust measures the same operation with the Rust client for about as long as Go took.
func (r *row) rust(cli, host, mode string, took time.Duration) error {
	secs := strconv.FormatFloat(max(took.Seconds(), 1), 'f', 2, 64)
	out, err := exec.Command(cli, "--json", "bench", "burst", "--host", host, "-c", "1", "-t", secs, "--mode", mode).Output()
	if err != nil {
		return fmt.Errorf("stockade bench burst --mode %s: %v: %s", mode, err, out)
	}
	var rep struct {
		Errors  int `json:"errors"`
		Latency struct {
			Operation struct {
				N   float64 `json:"n"`
				P50 float64 `json:"p50_ms"`
				P99 float64 `json:"p99_ms"`
			} `json:"operation"`
		} `json:"latency"`
		Examples []string `json:"error_examples"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return fmt.Errorf("stockade bench burst printed %q: %v", out, err)
	}
	if rep.Errors > 0 {
		return fmt.Errorf("stockade bench burst --mode %s had %d errors: %s", mode, rep.Errors, strings.Join(rep.Examples, "; "))
	}
	r.rustP50 = append(r.rustP50, rep.Latency.Operation.P50)
	r.rustP99 = append(r.rustP99, rep.Latency.Operation.P99)
	r.rstN = append(r.rstN, rep.Latency.Operation.N)
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// serve starts a daemon of the run's own on a temporary socket.
func serve(cli string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "stockade-go-bench-")
	if err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, "d.sock")
	log, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		return "", nil, err
	}
	defer log.Close()
	cmd := exec.Command(cli, "serve", "--listen", "unix://"+sock, "--state-dir", filepath.Join(dir, "state"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			return "unix://" + sock, stop, nil
		}
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			os.RemoveAll(dir)
			return "", nil, fmt.Errorf("stockade serve exited: %s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("stockade serve did not listen in 60 s")
		}
	}
}
