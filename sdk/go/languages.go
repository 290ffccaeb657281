package stockade

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Languages is every language RunCode knows, by its first name.
var Languages = []string{"python", "javascript", "typescript", "ruby", "php", "perl", "lua", "r", "bash", "sh", "zsh"}

// preset is how one language runs (the table of stockade-spec's language presets).
type preset struct {
	names       []string
	image       string   // its default image
	interpreter []string // argv prefix; the code follows codeFlag
	codeFlag    string
}

var presets = []preset{
	{[]string{"python", "python3", "py"}, "python:3.12-slim", []string{"python3"}, "-c"},
	{[]string{"javascript", "js", "node"}, "node:22-slim", []string{"node"}, "-e"},
	{[]string{"typescript", "ts"}, "denoland/deno:2.1.4", []string{"deno", "run", "--quiet"}, "--eval"},
	{[]string{"ruby", "rb"}, "ruby:3.3-slim", []string{"ruby"}, "-e"},
	{[]string{"php"}, "php:8.3-cli", []string{"php"}, "-r"},
	{[]string{"perl", "pl"}, "perl:5.40-slim", []string{"perl"}, "-e"},
	{[]string{"lua"}, "nickblah/lua:5.4", []string{"lua"}, "-e"},
	{[]string{"r"}, "r-base:4.4.1", []string{"Rscript"}, "-e"},
	{[]string{"bash"}, "bash:5.2", []string{"bash"}, "-c"},
	{[]string{"sh", "shell"}, "busybox:1.36", []string{"sh"}, "-c"},
	{[]string{"zsh"}, "zshusers/zsh:5.9", []string{"zsh"}, "-c"},
}

func findPreset(name string) (*preset, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for i := range presets {
		if slices.Contains(presets[i].names, n) {
			return &presets[i], nil
		}
	}
	return nil, invalid(fmt.Sprintf("unknown language %q; known: %s", name, strings.Join(Languages, ", ")))
}

// nodeTSBoot runs the TypeScript in process.argv[1] with Node, which strips types
// from files only: the code is written to a file in /tmp and imported as an ES
// module (as the Rust core does for `stockade run --language typescript`).
const nodeTSBoot = "const fs=require('fs'),os=require('os'),path=require('path')," +
	"url=require('url');const d=fs.mkdtempSync(path.join(os.tmpdir(),'stockade-ts-'));" +
	"const f=path.join(d,'main.mts');fs.writeFileSync(f,process.argv[1]);" +
	"process.argv.splice(1,1,f);import(url.pathToFileURL(f).href).catch(e=>{console.error(e);" +
	"process.exitCode=1});"

// tsLauncher runs $1 with deno when the sandbox has it, else with node stripping the
// types (Node 22.6 and later), so one argv serves both roots.
const tsLauncher = `if command -v deno >/dev/null 2>&1; then exec deno run --quiet --eval "$1"; fi
exec node --experimental-strip-types --disable-warning=ExperimentalWarning -e "$2" "$1"`

// codeArgv is the argv that runs code of p, its interpreter found on the sandbox's PATH.
func (p *preset) codeArgv(code string) []string {
	if p.names[0] == "typescript" {
		return []string{"/bin/sh", "-c", tsLauncher, "stockade-ts", code, nodeTSBoot}
	}
	argv := append([]string{}, p.interpreter...)
	return append(argv, p.codeFlag, code)
}

// RunOptions are the options of Client.RunCode.
type RunOptions struct {
	// Timeout is the code's deadline (default 30 s).
	Timeout time.Duration
	// Spec is the sandbox's (its Language is set to the code's).
	Spec Spec
	// Stdout and Stderr receive the output live.
	Stdout, Stderr io.Writer
}

// lifetimeGrace is how much longer than the code's deadline a one-shot sandbox lives.
const lifetimeGrace = 5 * time.Second

// RunCode runs code of language once in a fresh sandbox, destroyed afterwards. The
// sandbox's root has the language's interpreter (see Spec.Language).
func (c *Client) RunCode(ctx context.Context, language, code string, opts ...RunOptions) (*Result, error) {
	var o RunOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if _, err := findPreset(language); err != nil {
		return nil, err
	}
	spec := o.Spec
	spec.Language = language
	if spec.Timeout == 0 {
		spec.Timeout = o.Timeout.Truncate(time.Second) + time.Second + lifetimeGrace
	}
	sb, err := c.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	return sb.RunCode(ctx, "", code, ExecOptions{Timeout: o.Timeout, Stdout: o.Stdout, Stderr: o.Stderr})
}

// RunCode runs code of language ("": the sandbox's Spec.Language, else python) in
// the sandbox. A sandbox whose root lacks the interpreter is ErrUnavailable, naming
// the fix.
func (s *Sandbox) RunCode(ctx context.Context, language, code string, opts ...ExecOptions) (*Result, error) {
	lang := language
	if lang == "" {
		lang = s.language
	}
	if lang == "" {
		lang = "python"
	}
	p, err := findPreset(lang)
	if err != nil {
		return nil, err
	}
	r, err := s.Exec(ctx, p.codeArgv(code), opts...)
	if err != nil {
		return nil, err
	}
	// The agent's shim says so on stderr when argv[0] is not on PATH (exit 127).
	if r.ExitCode == 127 && (bytes.Contains(r.Stderr, []byte("command not found in PATH")) ||
		(p.names[0] == "typescript" && bytes.Contains(r.Stderr, []byte("node: not found")))) {
		return nil, newError(CodeUnavailable, fmt.Sprintf("the %s interpreter is unavailable: sandbox %s has no %s on its PATH "+
			"(fix: create a sandbox with Spec{Language: %q}, or an Image that has it)", p.names[0], s.id, p.interpreter[0], p.names[0]))
	}
	return r, nil
}

// LanguageSupport is how one language runs on the daemon's host, as `stockade
// languages --json` says.
type LanguageSupport struct {
	Language string `json:"language"`
	// How is host (the host's interpreter), image (an image in the store), pull (an
	// image pulled on first use), runtime (a WASI runtime) or unavailable.
	How string `json:"how"`
	// Detail is the interpreter's path, the image or the runtime.
	Detail string `json:"detail"`
	// Ready says it runs now, with nothing to fetch.
	Ready bool    `json:"ready"`
	Fix   *string `json:"fix"`
}

// languagesTTL is how long the CLI's answer is kept (an image pulled meanwhile shows
// up after it).
const languagesTTL = 30 * time.Second

// LanguageSupport is how each language runs for sandboxes of this client: the
// stockade CLI's answer on this host when the daemon is on a unix socket (the same
// host); ErrUnavailable when the daemon is elsewhere or the CLI is missing.
func (c *Client) LanguageSupport(ctx context.Context, provider string) ([]LanguageSupport, error) {
	if c.addr.Unix == "" {
		return nil, newError(CodeUnavailable, fmt.Sprintf("the languages of %s are unavailable: the daemon is on another host "+
			"(fix: name the language's Image in the Spec)", c.addr))
	}
	if provider == "" {
		provider = c.provider
	}
	c.langMu.Lock()
	defer c.langMu.Unlock()
	if c.langRows != nil && time.Since(c.langAt) < languagesTTL && provider == c.provider {
		return c.langRows, nil
	}
	bin, err := FindCLI(c.cli)
	if err != nil {
		return nil, err
	}
	args := []string{"--json", "--direct"}
	if provider != "" {
		args = append(args, "--provider", provider)
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "languages")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, newError(CodeUnavailable, fmt.Sprintf("the languages of this host are unavailable: %s languages failed (%v): %s "+
			"(fix: check that %s runs)", bin, err, strings.TrimSpace(stderr.String()), bin))
	}
	var rows []LanguageSupport
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, newError(CodeInternal, fmt.Sprintf("%s languages --json printed what the SDK cannot read (%v); use an SDK and CLI of one version", bin, err))
	}
	if provider == c.provider {
		c.langRows, c.langAt = rows, time.Now()
	}
	return rows, nil
}

// languageImage is the image a sandbox for language runs on ("" for the host's
// root), as the Rust core picks it: the host's interpreter when installed, else the
// language's image. Without the CLI's answer (a daemon elsewhere) it is the host's
// root, and RunCode says when the interpreter is missing.
func (c *Client) languageImage(ctx context.Context, language, provider string) (string, error) {
	p, err := findPreset(language)
	if err != nil {
		return "", err
	}
	rows, err := c.LanguageSupport(ctx, provider)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", nil
	}
	for _, r := range rows {
		if r.Language != p.names[0] {
			continue
		}
		switch r.How {
		case "host":
			return "", nil
		case "image", "pull", "runtime":
			return r.Detail, nil
		}
		fix := "install it on the daemon's host"
		if r.Fix != nil {
			fix = *r.Fix
		}
		return "", newError(CodeUnavailable, fmt.Sprintf("the %s interpreter is unavailable: %s (fix: %s)", p.names[0], r.Detail, fix))
	}
	return "", nil
}

// probeScript prints the name of each language whose interpreter the sandbox has on
// its PATH (TypeScript: deno, or node 22.6 or later).
const probeScript = `for l in python:python3 javascript:node ruby:ruby php:php perl:perl lua:lua r:Rscript bash:bash sh:sh zsh:zsh; do
  command -v "${l#*:}" >/dev/null 2>&1 && echo "${l%%:*}"
done
if command -v deno >/dev/null 2>&1 || node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a==22&&b>=6)?0:1)' 2>/dev/null; then echo typescript; fi`

// AvailableLanguages is the languages that run now for sandboxes of this client:
// those `stockade languages` calls ready when the daemon is on this host, else those
// whose interpreter a fresh sandbox on the daemon's host has.
func (c *Client) AvailableLanguages(ctx context.Context) ([]string, error) {
	if rows, err := c.LanguageSupport(ctx, ""); err == nil {
		var out []string
		for _, r := range rows {
			if r.Ready {
				out = append(out, r.Language)
			}
		}
		return out, nil
	} else if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	sb, err := c.Create(ctx, Spec{Timeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	r, err := sb.Exec(ctx, Shell(probeScript), ExecOptions{Timeout: 20 * time.Second})
	if err != nil {
		return nil, err
	}
	found := strings.Fields(string(r.Stdout))
	var out []string
	for _, l := range Languages {
		if slices.Contains(found, l) {
			out = append(out, l)
		}
	}
	return out, nil
}
