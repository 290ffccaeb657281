package stockade

// Tests that need no daemon: addresses, errors, the spec's JSON, the tools' schemas,
// the host-side unpacking rule, and that the generated code and language table match
// their Rust sources.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestEverySpellingParsesToOneAddress(t *testing.T) {
	for _, s := range []string{"unix:///run/x.sock", "unix:/run/x.sock", "/run/x.sock"} {
		a, err := ParseAddress(s)
		if err != nil || a != (Address{Unix: "/run/x.sock"}) {
			t.Errorf("%s: %+v %v", s, a, err)
		}
	}
	for _, s := range []string{"tcp://127.0.0.1:7000", "tcp:127.0.0.1:7000", "127.0.0.1:7000"} {
		a, err := ParseAddress(s)
		if err != nil || a != (Address{Host: "127.0.0.1", Port: 7000}) {
			t.Errorf("%s: %+v %v", s, a, err)
		}
	}
	if a, _ := ParseAddress("https://d.example:443/"); a != (Address{Host: "d.example", Port: 443, Security: SecurityTLS}) {
		t.Errorf("https: %+v", a)
	}
	if a, _ := ParseAddress("http://[::1]:7000"); a != (Address{Host: "::1", Port: 7000, Security: SecurityPlain}) {
		t.Errorf("http v6: %+v", a)
	}
	for _, s := range []string{"unix:///run/x.sock", "tcp://10.0.0.1:7000", "https://[::1]:7000", "http://localhost:1"} {
		a, err := ParseAddress(s)
		if err != nil || a.String() != s {
			t.Errorf("%s displays as %s (%v)", s, a, err)
		}
	}
}

func TestBadAddressesSayWhatIsWrong(t *testing.T) {
	for bad, why := range map[string]string{
		"unix://rel": "absolute", "unix:rel": "absolute", "ftp://x:1": "scheme", "http://": "no port",
		"x": "no port", "x:http": "port", "x:0": "port 0", ":7000": "no host", "::1:7000": "brackets",
		"[nothost]:1": "IPv6", "http://x:1/api": "path", "": "no port",
	} {
		_, err := ParseAddress(bad)
		if err == nil || !strings.Contains(err.Error(), "daemon address") || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v (want %q)", bad, err, why)
		}
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: %v is not ErrInvalidSpec", bad, err)
		}
	}
}

func TestLoopbackAndTLSChoice(t *testing.T) {
	a := func(s string) Address {
		x, err := ParseAddress(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for s, loop := range map[string]bool{"/s": true, "localhost:1": true, "127.0.0.2:1": true, "[::1]:1": true, "10.0.0.1:1": false, "d.example:1": false} {
		if a(s).IsLoopback() != loop {
			t.Errorf("%s: loopback %v", s, !loop)
		}
	}
	cases := []struct {
		addr  string
		hasCA bool
		tls   bool
	}{
		{"127.0.0.1:1", false, false}, {"127.0.0.1:1", true, true}, {"10.0.0.1:1", false, true},
		{"http://10.0.0.1:1", true, false}, {"https://127.0.0.1:1", false, true}, {"/s", true, false},
	}
	for _, c := range cases {
		if a(c.addr).UsesTLS(c.hasCA) != c.tls {
			t.Errorf("%s with CA %v: TLS %v", c.addr, c.hasCA, !c.tls)
		}
	}
}

func TestTheDefaultSocketIsTheRustClients(t *testing.T) {
	got := DefaultSocket()
	switch {
	case os.Geteuid() == 0:
		if got != "/run/stockaded.sock" {
			t.Fatal(got)
		}
	default:
		t.Setenv("XDG_RUNTIME_DIR", "/run/user/1234")
		if got := DefaultSocket(); got != "/run/user/1234/stockaded.sock" {
			t.Fatal(got)
		}
	}
}

func TestStatusCodesMapToErrorCodes(t *testing.T) {
	for c, want := range map[codes.Code]Code{
		codes.InvalidArgument: CodeInvalidSpec, codes.FailedPrecondition: CodeInvalidSpec, codes.OutOfRange: CodeInvalidSpec,
		codes.NotFound: CodeNotFound, codes.Unavailable: CodeUnavailable, codes.DeadlineExceeded: CodeTimeout,
		codes.ResourceExhausted: CodeLimitExceeded, codes.PermissionDenied: CodePolicyDenied,
		codes.Unauthenticated: CodePolicyDenied, codes.Internal: CodeInternal, codes.Unknown: CodeInternal,
	} {
		if got := codeOf(c); got != want {
			t.Errorf("%v -> %s, want %s", c, got, want)
		}
	}
}

func TestErrorsMatchTheirSentinelsOnly(t *testing.T) {
	type want struct {
		is    []error
		isNot []error
	}
	cases := map[*Error]want{
		newError(CodeNotFound, "sandbox sb-1 not found"):                     {[]error{ErrNotFound}, []error{fs.ErrNotExist, ErrGone, ErrUnavailable}},
		newError(CodeNotFound, "path /tmp/x not found"):                      {[]error{ErrNotFound, fs.ErrNotExist}, []error{fs.ErrExist}},
		newError(CodeInternal, "path /tmp/x not found"):                      {[]error{ErrInternal}, []error{fs.ErrNotExist, ErrNotFound}},
		newError(CodeInvalidSpec, "path /a already exists; remove it first"): {[]error{ErrInvalidSpec, fs.ErrExist}, []error{fs.ErrNotExist}},
		newError(CodeUnavailable, "sandbox sb-2 is gone: it was destroyed"):  {[]error{ErrUnavailable, ErrGone}, []error{ErrNotFound}},
		newError(CodeInternal, "sandbox sb-2 is gone: x"):                    {[]error{ErrInternal}, []error{ErrGone}},
		newError(CodeInvalidSpec, "sandbox sb-3 is paused; resume it first"): {[]error{ErrInvalidSpec, ErrPaused}, []error{ErrGone}},
		newError(CodePolicyDenied, "denied by rule x"):                       {[]error{ErrDenied, fs.ErrPermission}, []error{ErrLimit}},
		newError(CodeLimitExceeded, "64 sandboxes"):                          {[]error{ErrLimit}, []error{ErrDenied}},
		newError(CodeTimeout, "pull timed out"):                              {[]error{ErrTimeout}, []error{context.DeadlineExceeded}},
	}
	for e, w := range cases {
		wrapped := errors.Join(errors.New("context"), e)
		for _, s := range w.is {
			if !errors.Is(wrapped, s) {
				t.Errorf("%s %q is not %v", e.Code, e.Message, s)
			}
		}
		for _, s := range w.isNot {
			if errors.Is(wrapped, s) {
				t.Errorf("%s %q is %v", e.Code, e.Message, s)
			}
		}
	}
	e := newError(CodeInvalidSpec, "path /tmp is a directory; read a file")
	if !e.IsDir() || e.Path != "/tmp" {
		t.Errorf("%+v", e)
	}
	e = newError(CodeUnavailable, "stockaded is unavailable: refused (fix: start it with `stockade serve`)")
	if e.Fix != "start it with `stockade serve`" || e.Error() != e.Message {
		t.Errorf("fix %q", e.Fix)
	}
}

func TestTheDefaultSpecIsTheSecureOne(t *testing.T) {
	js, err := Spec{}.specJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"env":{},"hardening":{"landlock":true,"seccomp":true},"idle_timeout_secs":null,"image":null,` +
		`"labels":{},"limits":{"cpus":1,"memory_bytes":"512m","pids":64,"tmp_bytes":"64m"},"mounts":[],` +
		`"network":"none","timeout_secs":300,"workdir":null,"writable":false}`
	if got := marshal(js); got != want {
		t.Fatalf("default spec\n got %s\nwant %s", got, want)
	}
}

func TestSpecFieldsReachTheJSON(t *testing.T) {
	ws := t.TempDir()
	js, err := Spec{
		Image: "python:3.12-slim", Writable: true, Timeout: 1500 * time.Millisecond, IdleTimeout: time.Minute,
		Memory: "1g", CPUs: 0.5, Pids: 10, TmpSize: "8m", Env: map[string]string{"A": "1"},
		Mounts: []Mount{{Host: "/srv", Target: "/data"}}, Workspace: ws, WorkspaceWritable: true,
		User: &User{UID: 0, GID: 0}, Hostname: "h", NoSeccomp: true, Labels: map[string]string{"k": "v"},
		Network: Network{Allow: []string{"pypi.org"}, Credentials: []Credential{{Host: "pypi.org", Value: "Bearer x", Env: "KEY"}}},
	}.specJSON()
	if err != nil {
		t.Fatal(err)
	}
	got := marshal(js)
	for _, part := range []string{
		`"image":"python:3.12-slim"`, `"writable":true`, `"timeout_secs":2`, `"idle_timeout_secs":60`,
		`"memory_bytes":"1g"`, `"cpus":0.5`, `"pids":10`, `"tmp_bytes":"8m"`, `"env":{"A":"1"}`,
		`{"host":"/srv","target":"/data","writable":false}`, `{"host":"` + ws + `","target":"/work","writable":true}`,
		`"workdir":"/work"`, `"user":{"uid":0,"gid":0}`, `"hostname":"h"`, `"seccomp":false`, `"landlock":true`,
		`"network":{"allow":["pypi.org"],"credentials":[{"host":"pypi.org","value":"Bearer x","env":"KEY"}],"deny":[]}`,
	} {
		if !strings.Contains(got, part) {
			t.Errorf("missing %s in %s", part, got)
		}
	}
	if v, _ := (Network{All: true}).json(); v != "egress" {
		t.Errorf("All: %v", v)
	}
	if _, err := (Spec{Network: Network{All: true, Allow: []string{"x"}}}).specJSON(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("All with Allow: %v", err)
	}
	if _, err := (Spec{Timeout: -time.Second}).specJSON(); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "Timeout") {
		t.Errorf("negative timeout: %v", err)
	}
}

func TestToolSchemasAreThePythonSDKs(t *testing.T) {
	langs := []string{"python", "bash"}
	want := `{"additionalProperties":false,"properties":{"code":{"description":"The code to run.","type":"string"},` +
		`"language":{"description":"Language of the code.","enum":["python","bash"],"type":"string"}},` +
		`"required":["language","code"],"type":"object"}`
	if got := marshal(RunCodeSchema(langs)); got != want {
		t.Fatalf("schema\n got %s\nwant %s", got, want)
	}
	a := AnthropicTool(langs)
	if a["name"] != "run_code" || a["description"] != ToolDescription || !reflect.DeepEqual(a["input_schema"], RunCodeSchema(langs)) {
		t.Errorf("anthropic: %v", a)
	}
	chat, err := OpenAITool("chat", langs)
	if err != nil {
		t.Fatal(err)
	}
	fn := chat["function"].(map[string]any)
	if chat["type"] != "function" || fn["name"] != "run_code" || fn["strict"] != true || !reflect.DeepEqual(fn["parameters"], RunCodeSchema(langs)) {
		t.Errorf("chat: %v", chat)
	}
	resp, _ := OpenAITool("responses", langs)
	if resp["type"] != "function" || resp["name"] != "run_code" || resp["parameters"] == nil {
		t.Errorf("responses: %v", resp)
	}
	if _, err := OpenAITool("completions", langs); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("bad api: %v", err)
	}
	if !strings.Contains(marshal(RunCodeSchema(nil)), `"enum":[]`) {
		t.Error("nil languages must be an empty enum")
	}
}

func TestMalformedToolCallsAreFailedResults(t *testing.T) {
	var c Client // no daemon is asked for malformed arguments
	for _, args := range []string{"{not json", `{"language": "python"}`, `{"language": 1, "code": "x"}`} {
		r := c.HandleToolCall(context.Background(), []byte(args), ToolOptions{})
		var out map[string]any
		if err := json.Unmarshal([]byte(r.JSON()), &out); err != nil {
			t.Fatal(err)
		}
		e, _ := out["error"].(map[string]any)
		if out["ok"] != false || e["code"] != "invalid_spec" || !strings.Contains(e["message"].(string), "bad tool arguments") {
			t.Errorf("%s: %v", args, out)
		}
	}
	r := FailedToolResult(newError(CodeUnavailable, "no daemon"))
	if r.JSON() != `{"error":{"code":"unavailable","message":"no daemon"},"ok":false}` {
		t.Error(r.JSON())
	}
	res := ToolResult{OK: true, Result: &Result{Stdout: []byte("4\n"), Duration: 12 * time.Millisecond}}
	var out map[string]any
	_ = json.Unmarshal([]byte(res.JSON()), &out)
	for _, k := range []string{"ok", "exit_code", "signal", "stdout", "stderr", "timed_out", "oom_killed", "truncated",
		"stdout_dropped_bytes", "stderr_dropped_bytes", "duration_ms", "egress_denied"} {
		if _, ok := out[k]; !ok {
			t.Errorf("result JSON lacks %s: %s", k, res.JSON())
		}
	}
	if out["stdout"] != "4\n" || out["duration_ms"] != 12.0 || out["signal"] != nil {
		t.Errorf("%s", res.JSON())
	}
}

func TestUnknownLanguagesAreRefusedByName(t *testing.T) {
	_, err := findPreset("cobol")
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), `unknown language "cobol"`) || !strings.Contains(err.Error(), "python, javascript") {
		t.Fatal(err)
	}
	for _, alias := range []string{"py", "Python3", " JS ", "ts", "shell"} {
		if _, err := findPreset(alias); err != nil {
			t.Errorf("%s: %v", alias, err)
		}
	}
}

// repoFile is a file of the repository around the module, or a skip when the module
// is used outside it.
func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Skipf("not inside the Stockade repository (%v)", err)
	}
	return b
}

func TestGeneratedCodeIsFromTheCurrentProto(t *testing.T) {
	proto := repoFile(t, "crates/stockade-client/proto/stockade.proto")
	recorded, err := os.ReadFile("pb/stockade.proto.sha256")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(proto)
	if got := hex.EncodeToString(sum[:]); got != strings.TrimSpace(string(recorded)) {
		t.Fatalf("pb/*.pb.go were generated from another stockade.proto (sha256 %s, now %s): run sdk/go/gen.sh", strings.TrimSpace(string(recorded)), got)
	}
}

func TestLanguageTableIsTheRustOne(t *testing.T) {
	src := string(repoFile(t, "crates/stockade-spec/src/language.rs"))
	re := regexp.MustCompile(`(?s)LanguagePreset \{\s*language: Language::\w+,\s*names: &\[([^\]]*)\],\s*image: "([^"]*)",\s*interpreter: &\[([^\]]*)\],\s*code_flag: "([^"]*)"`)
	list := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.Trim(strings.TrimSpace(p), `"`); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	var rust []preset
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		rust = append(rust, preset{names: list(m[1]), image: m[2], interpreter: list(m[3]), codeFlag: m[4]})
	}
	if !reflect.DeepEqual(rust, presets) {
		t.Fatalf("the Go language table differs from crates/stockade-spec/src/language.rs:\nrust %v\n  go %v", rust, presets)
	}
	var first []string
	for _, p := range presets {
		first = append(first, p.names[0])
	}
	if !reflect.DeepEqual(first, Languages) {
		t.Fatalf("Languages %v, presets %v", Languages, first)
	}
}

// tarball builds a tar of entries: name -> content ("->target" makes a symlink, a
// name ending in / a directory, "!hard" a hard link, "!fifo" a fifo).
func tarball(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o6777, Typeflag: tar.TypeReg, Size: int64(len(e[1]))}
		switch {
		case strings.HasSuffix(e[0], "/"):
			h.Typeflag, h.Size = tar.TypeDir, 0
		case strings.HasPrefix(e[1], "->"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e[1][2:], 0
		case e[1] == "!hard":
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, "a", 0
		case e[1] == "!fifo":
			h.Typeflag, h.Size = tar.TypeFifo, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e[1]))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestHostileArchivesAreRefusedWhole(t *testing.T) {
	cases := map[string][][2]string{
		"leaves the target":   {{"ok", "x"}, {"../evil", "x"}},
		"leaves the target ":  {{"/etc/evil", "x"}},
		"hard link":           {{"a", "x"}, {"b", "!hard"}},
		"fifo":                {{"p", "!fifo"}},
		"appears twice":       {{"a", "x"}, {"./a", "y"}},
		"below the symlink":   {{"l", "->d"}, {"l/x", "y"}},
		"leaves the dest":     {{"d/", ""}, {"d/l", "->../../outside"}},
		"is absolute":         {{"l", "->/etc/passwd"}},
		"leaves the dest ":    {{"a", "->b/.."}, {"b", "->.."}, {"c", "->a/x"}},
		"too many links":      {{"a", "->b"}, {"b", "->a"}},
		"names the target di": {{".", "x"}},
	}
	for why, entries := range cases {
		dest := filepath.Join(t.TempDir(), "out")
		err := UnpackOnHost(tarball(t, entries...), dest)
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), strings.TrimSpace(why)) {
			t.Errorf("%s: %v", why, err)
		}
		if _, statErr := os.Stat(dest); !errors.Is(statErr, fs.ErrNotExist) {
			t.Errorf("%s: something was written before the refusal", why)
		}
	}
	if err := UnpackOnHost([]byte("not a tar archive, clearly: it is far too short"), t.TempDir()); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("garbage: %v", err)
	}
}

func TestArchivesUnpackWithSafeModesAndInsideLinks(t *testing.T) {
	dest := t.TempDir()
	err := UnpackOnHost(tarball(t, [2]string{"./", ""}, [2]string{"d/", ""}, [2]string{"d/f", "hello"}, [2]string{"d/l", "->f"}, [2]string{"top", "->d/f"}), dest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dest, "top"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
	st, _ := os.Stat(filepath.Join(dest, "d", "f"))
	if st.Mode().Perm() != 0o755 || st.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		t.Errorf("mode %v: setuid, setgid, sticky and group/other write must go", st.Mode())
	}
	// A symlink already in dest that leads out is never written through.
	outside := t.TempDir()
	dest = t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dest, "esc")); err != nil {
		t.Fatal(err)
	}
	err = UnpackOnHost(tarball(t, [2]string{"esc/pwned", "x"}), dest)
	if !errors.Is(err, ErrDenied) {
		t.Errorf("through an existing link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a file was written outside dest")
	}
}

func TestUploadsPackFilesDirsAndLinks(t *testing.T) {
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "a.txt"), []byte("A"), 0o644)
	os.Symlink("sub/a.txt", filepath.Join(src, "link"))
	b, err := tarOf(src)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := checkArchive(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.name)
	}
	want := []string{"proj", "proj/link", "proj/sub", "proj/sub/a.txt"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("%v, want %v", names, want)
	}
	if _, err := tarOf(filepath.Join(src, "missing")); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("missing source: %v", err)
	}
}

func TestDaemonStatusesPassThroughAndBrokenConnectionsNameTheDaemon(t *testing.T) {
	c := &Client{addr: Address{Unix: "/run/x.sock"}}
	ctx := context.Background()
	daemonSaid := "the registry is unavailable: x509: certificate signed by unknown authority (fix: check the reference)"
	err := c.fail(ctx, status.Error(codes.Unavailable, daemonSaid))
	if !errors.Is(err, ErrUnavailable) || err.Error() != daemonSaid {
		t.Errorf("a daemon's message must reach the caller unchanged: %v", err)
	}
	gone := "sandbox sb-1 is gone: the agent connection closed"
	if err := c.fail(ctx, status.Error(codes.Unavailable, gone)); !errors.Is(err, ErrGone) || err.Error() != gone {
		t.Errorf("gone: %v", err)
	}
	err = c.fail(ctx, status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix /run/x.sock: connect: connection refused"`))
	var se *Error
	if !errors.As(err, &se) || se.Code != CodeUnavailable || !strings.Contains(se.Message, "stockaded at unix:///run/x.sock") || se.Fix == "" {
		t.Errorf("refused connection: %v", err)
	}
	err = c.fail(ctx, status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`))
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "STOCKADE_TLS_CA") {
		t.Errorf("TLS failure: %v", err)
	}
	if err := c.fail(ctx, status.Error(codes.Unauthenticated, "missing or wrong token")); !errors.Is(err, ErrDenied) {
		t.Errorf("token: %v", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.fail(done, status.Error(codes.Canceled, "context canceled")); err != context.Canceled {
		t.Errorf("an ended context is its own error: %v", err)
	}
}
