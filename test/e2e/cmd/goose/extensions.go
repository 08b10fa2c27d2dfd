package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// This file is the stand-in's extension manager: for each session it starts
// the enabled stdio extensions of goose's layered config and keeps their MCP
// sessions, as goose's ExtensionManager does (crates/goose/src/agents/
// extension_manager.rs, add_extension and child_process_client; the config
// layers of crates/goose/src/config/base.rs). Platform, builtin and
// streamable_http extensions are goose's own or remote; the stand-in starts
// none of them and leaves them out of extensionResults.

// defaultExtensionTimeout is goose's DEFAULT_EXTENSION_TIMEOUT in seconds:
// it bounds starting an extension and each tool call.
const defaultExtensionTimeout = 300

// extensionConfig is one entry of config.yaml's extensions map, the fields
// goose reads for a stdio extension (ExtensionConfig::Stdio).
type extensionConfig struct {
	Enabled bool              `json:"enabled"`
	Type    string            `json:"type"`
	Name    string            `json:"name"`
	Cmd     string            `json:"cmd"`
	Args    []string          `json:"args"`
	Envs    map[string]string `json:"envs"`
	EnvKeys []string          `json:"env_keys"`
	Timeout *int64            `json:"timeout"`
}

// runningExtension is one started extension of a session.
type runningExtension struct {
	key     string // name_to_key(name), the prefix of its tools
	session *mcp.ClientSession
	tools   []*mcp.Tool
	timeout time.Duration
	stop    context.CancelFunc // kills the process
}

// close ends the MCP session (closing the server's stdin, then signals, as
// the MCP stdio transport says) and makes sure the process is gone.
func (e *runningExtension) close() {
	_ = e.session.Close()
	e.stop()
}

// extensionHost implements goosetest.ServeExtensions.
type extensionHost struct {
	configPaths []string
	client      *mcp.Client

	mu       sync.Mutex
	sessions map[string][]*runningExtension
	// dirs is each session's working directory, as session/new named it.
	dirs map[string]string
}

func newExtensionHost(configPaths []string) *extensionHost {
	return &extensionHost{
		configPaths: configPaths,
		// goose's MCP client names itself after the goose binary's version.
		client:   mcp.NewClient(&mcp.Implementation{Name: "goose", Version: goosetest.ServeVersion}, nil),
		sessions: map[string][]*runningExtension{},
		dirs:     map[string]string{},
	}
}

// WorkingDir is the session's working directory; "" when unknown.
func (h *extensionHost) WorkingDir(sessionID string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dirs[sessionID]
}

// gooseConfigPaths are goose's config layers, lowest precedence first
// (base.rs Config::default): defaults.yaml next to the binary,
// /etc/goose/config.yaml, GOOSE_ADDITIONAL_CONFIG_FILES, then the user's
// config.yaml.
func gooseConfigPaths() []string {
	var paths []string
	if exe, err := os.Executable(); err == nil {
		paths = append(paths, filepath.Join(filepath.Dir(exe), "defaults.yaml"))
	}
	paths = append(paths, "/etc/goose/config.yaml")
	if v := os.Getenv("GOOSE_ADDITIONAL_CONFIG_FILES"); v != "" {
		paths = append(paths, filepath.SplitList(v)...)
	}
	// Paths::config_dir: <GOOSE_PATH_ROOT>/config, else ~/.config/goose.
	dir := filepath.Join(os.Getenv("HOME"), ".config", "goose")
	if root := os.Getenv("GOOSE_PATH_ROOT"); root != "" {
		dir = filepath.Join(root, "config")
	}
	return append(paths, filepath.Join(dir, "config.yaml"))
}

// loadExtensions reads the extensions map from the config layers; a later
// layer overrides an earlier one field by field within an extension
// (merge_extensions). Missing files are skipped; goose skips unreadable ones
// with a warning too.
func loadExtensions(paths []string) (map[string]extensionConfig, error) {
	merged := map[string]map[string]any{}
	var errs []error
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to read config %s: %w", p, err))
			continue
		}
		// YAML 1.2, as goose's serde_yaml: an extension named off stays a string.
		var layer struct {
			Extensions map[string]map[string]any `yaml:"extensions"`
		}
		if err := yaml.Unmarshal(b, &layer); err != nil {
			errs = append(errs, fmt.Errorf("failed to parse config %s: %w", p, err))
			continue
		}
		for key, fields := range layer.Extensions {
			if merged[key] == nil {
				merged[key] = map[string]any{}
			}
			maps.Copy(merged[key], fields)
		}
	}
	out := map[string]extensionConfig{}
	for key, fields := range merged {
		b, err := json.Marshal(fields)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to encode extension %s: %w", key, err))
			continue
		}
		var c extensionConfig
		if err := json.Unmarshal(b, &c); err != nil {
			errs = append(errs, fmt.Errorf("failed to decode extension %s: %w", key, err))
			continue
		}
		if c.Name == "" {
			c.Name = key
		}
		out[key] = c
	}
	return out, errors.Join(errs...)
}

// Activate starts the session's enabled stdio extensions in workingDir,
// replacing any it already has.
func (h *extensionHost) Activate(sessionID, workingDir string) []goosetest.ExtensionResult {
	h.Release(sessionID)
	exts, err := loadExtensions(h.configPaths)
	if err != nil {
		// goose warns and goes on with what it could read.
		fmt.Fprintln(os.Stderr, "goose: warning:", err)
	}
	keys := make([]string, 0, len(exts))
	for k, c := range exts {
		if c.Enabled && c.Type == "stdio" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var results []goosetest.ExtensionResult
	var running []*runningExtension
	for _, k := range keys {
		c := exts[k]
		ext, err := h.startStdio(c, sessionID, workingDir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goose: session %s: extension %s failed to start: %v\n", sessionID, c.Name, err)
			results = append(results, goosetest.ExtensionResult{Name: c.Name, Error: err.Error()})
			continue
		}
		results = append(results, goosetest.ExtensionResult{Name: c.Name, Success: true})
		running = append(running, ext)
	}
	h.mu.Lock()
	h.sessions[sessionID] = running
	h.dirs[sessionID] = workingDir
	h.mu.Unlock()
	return results
}

// Release stops the session's extensions.
func (h *extensionHost) Release(sessionID string) {
	h.mu.Lock()
	running := h.sessions[sessionID]
	delete(h.sessions, sessionID)
	h.mu.Unlock()
	for _, ext := range running {
		ext.close()
	}
}

// Close stops every session's extensions.
func (h *extensionHost) Close() {
	h.mu.Lock()
	ids := make([]string, 0, len(h.sessions))
	for id := range h.sessions {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.Release(id)
	}
}

// startStdio starts one stdio extension and lists its tools: the command
// resolved on goose's search path, its args, goose's environment plus envs,
// env_keys and AGENT_SESSION_ID, PATH set to the search path, the session's
// working directory (merge_environments, add_extension, child_process_client).
func (h *extensionHost) startStdio(c extensionConfig, sessionID, workingDir string) (*runningExtension, error) {
	timeout := time.Duration(defaultExtensionTimeout) * time.Second
	if c.Timeout != nil && *c.Timeout > 0 {
		timeout = time.Duration(*c.Timeout) * time.Second
	}
	env := maps.Clone(c.Envs)
	if env == nil {
		env = map[string]string{}
	}
	// env_keys are secrets goose reads from its own environment first.
	for _, k := range c.EnvKeys {
		if _, ok := env[k]; ok {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		} else {
			fmt.Fprintf(os.Stderr, "goose: warning: extension %s: secret %s not found\n", c.Name, k)
		}
	}
	env["AGENT_SESSION_ID"] = sessionID

	home := os.Getenv("HOME")
	path, err := resolveCommand(c.Cmd, home, os.Getenv("PATH"))
	if err != nil {
		return nil, err
	}
	// The process lives as long as the session's extension; the context
	// kills it should closing its MCP session not end it.
	procCtx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(procCtx, path, c.Args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// PATH last: goose sets it after the extension's envs, so it wins.
	cmd.Env = append(cmd.Env, "PATH="+strings.Join(searchPath(home, os.Getenv("PATH"), false), string(filepath.ListSeparator)))
	if fi, err := os.Stat(workingDir); err == nil && fi.IsDir() {
		cmd.Dir = workingDir
	}
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	session, err := h.client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		stop()
		return nil, fmt.Errorf("failed to initialize MCP server %s: %w (stderr: %q)", path, err, stderr.String())
	}
	ext := &runningExtension{key: nameToKey(c.Name), session: session, stop: stop, timeout: timeout}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			ext.close()
			return nil, fmt.Errorf("failed to list the tools of %s: %w", path, err)
		}
		ext.tools = append(ext.tools, t)
	}
	return ext, nil
}

// searchPath is goose's SearchPaths: ~/.local/bin and /usr/local/bin, with
// ~/.npm-global/bin after them when resolving a command (with_npm), then
// goose's own PATH (crates/goose/src/config/search_path.rs).
func searchPath(home, path string, withNpm bool) []string {
	dirs := []string{filepath.Join(home, ".local", "bin"), "/usr/local/bin"}
	if withNpm {
		dirs = append(dirs, filepath.Join(home, ".npm-global", "bin"))
	}
	return append(dirs, filepath.SplitList(path)...)
}

// resolveCommand finds cmd as goose's resolve_command does: a name is looked
// up on the search path, a path is taken as is.
func resolveCommand(cmd, home, path string) (string, error) {
	if cmd == "" {
		return "", errors.New("the extension has no cmd")
	}
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	for _, dir := range searchPath(home, path, true) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, cmd)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("could not resolve command '%s': file does not exist", cmd)
}

// nameToKey is goose's name_to_key (config/extensions.rs): the extension's
// key and the prefix of its tools.
func nameToKey(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case unicode.IsSpace(r):
		case r < 128 && (r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'):
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	return strings.ToLower(b.String())
}

// Tools lists the session's tools as goose offers them to the model:
// <extension key>__<tool>, sorted.
func (h *extensionHost) Tools(sessionID string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for _, ext := range h.sessions[sessionID] {
		for _, t := range ext.tools {
			names = append(names, ext.key+"__"+t.Name)
		}
	}
	sort.Strings(names)
	return names
}

// Call runs a prefixed tool of the session through its MCP server and
// returns the result's text content and whether it is an error.
func (h *extensionHost) Call(sessionID, name string, args json.RawMessage) (string, bool) {
	key, tool, ok := strings.Cut(name, "__")
	if !ok {
		return fmt.Sprintf("Tool %s not found", name), true
	}
	h.mu.Lock()
	var ext *runningExtension
	for _, e := range h.sessions[sessionID] {
		if e.key == key {
			ext = e
		}
	}
	h.mu.Unlock()
	if ext == nil {
		return fmt.Sprintf("Tool %s not found", name), true
	}
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ext.timeout)
	defer cancel()
	res, err := ext.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return fmt.Sprintf("failed to call %s: %v", name, err), true
	}
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String(), res.IsError
}

// tailBuffer keeps the last max bytes written to it: a failed extension's
// stderr for the error goose reports.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
