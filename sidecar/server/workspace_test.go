package server_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose"
	"github.com/adk2goose/goose-operator/sidecar/goose/acp"
	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server"
	"github.com/adk2goose/goose-operator/sidecar/workspace"
)

// shellGoose is a fake `goose serve` whose script stands in for goose's
// developer shell: "write NAME=TEXT" creates a file in the session's working
// directory, "ls" lists it, "pwd" prints it. So a test sees what goose's
// tools would see, through the real sidecar and ACP client.
func shellGoose(t *testing.T) *goosetest.Serve {
	t.Helper()
	var f *goosetest.Serve
	f = goosetest.NewServe(t, goosetest.WithServeScript(func(sid, text string) goosetest.Reply {
		ss, _ := f.Session(sid)
		cmd, arg, _ := strings.Cut(text, " ")
		var out string
		switch cmd {
		case "write":
			name, body, _ := strings.Cut(arg, "=")
			if err := os.WriteFile(filepath.Join(ss.WorkingDir, name), []byte(body), 0o600); err != nil {
				out = "error: " + err.Error()
			} else {
				out = "wrote " + name
			}
		case "ls":
			entries, err := os.ReadDir(ss.WorkingDir)
			if err != nil {
				out = "error: " + err.Error()
				break
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			out = "[" + strings.Join(names, " ") + "]"
		case "pwd":
			out = ss.WorkingDir
		}
		return goosetest.Reply{Steps: []goosetest.Step{{Text: out}}}
	}))
	return f
}

// acpClient is a new ACP connection to f: a restarted sidecar's.
func acpClient(t *testing.T, f *goosetest.Serve) goose.Backend {
	t.Helper()
	c, err := acp.New(acp.Config{URL: f.URL, SecretKey: f.Secret, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newWorkspaces(t *testing.T, root string, scope workspace.Scope) *workspace.Manager {
	t.Helper()
	m, err := workspace.New(workspace.Config{Root: root, Scope: scope, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// shellSidecar starts a sidecar, as a restarted pod would be: its own goose
// connection to f, data on dataDir, workspaces of scope under root.
func shellSidecar(t *testing.T, f *goosetest.Serve, dataDir, root string, scope workspace.Scope) *sidecar {
	t.Helper()
	ws := newWorkspaces(t, root, scope)
	return startSidecar(t, acpClient(t, f), dataDir, func(c *server.Config) { c.Workspaces = ws })
}

// say runs one turn and returns goose's text.
func (s *sidecar) say(user, session, text string) string {
	s.t.Helper()
	code, body := s.do(http.MethodPost, "/run", runBody(user, session, text, false))
	var events []map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &events) != nil || len(events) == 0 {
		s.t.Fatalf("run %q as %s/%s: %d %s", text, user, session, code, body)
	}
	last := events[len(events)-1]
	if last["errorCode"] != nil {
		s.t.Fatalf("run %q as %s/%s: %v %v", text, user, session, last["errorCode"], last["errorMessage"])
	}
	out, _ := jpath(last, "content", "parts", 0, "text").(string)
	return out
}

func TestWorkspaceScopes(t *testing.T) {
	for _, tc := range []struct {
		scope workspace.Scope
		// what bob's session and alice's second session list after alice's
		// first session wrote notes.txt
		bob, alice2 string
	}{
		{workspace.ScopeSession, "[]", "[]"},
		{workspace.ScopeUser, "[]", "[notes.txt]"},
		{workspace.ScopeAgent, "[notes.txt]", "[notes.txt]"}, // one shared directory, as before workspaces
	} {
		t.Run(string(tc.scope), func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "workspace")
			f := shellGoose(t)
			sc := shellSidecar(t, f, t.TempDir(), root, tc.scope)
			for _, s := range [][2]string{{"alice", "s1"}, {"alice", "s2"}, {"bob", "s1"}} {
				sc.createSession(s[0], s[1])
			}
			if got := sc.say("alice", "s1", "write notes.txt=alice's plan"); got != "wrote notes.txt" {
				t.Fatalf("write: %q", got)
			}
			if got := sc.say("alice", "s1", "ls"); got != "[notes.txt]" {
				t.Fatalf("alice/s1 ls: %q", got)
			}
			if got := sc.say("bob", "s1", "ls"); got != tc.bob {
				t.Errorf("bob/s1 sees %s, want %s", got, tc.bob)
			}
			if got := sc.say("alice", "s2", "ls"); got != tc.alice2 {
				t.Errorf("alice/s2 sees %s, want %s", got, tc.alice2)
			}
			for _, s := range [][2]string{{"alice", "s1"}, {"alice", "s2"}, {"bob", "s1"}} {
				pwd := sc.say(s[0], s[1], "pwd")
				if rel, err := filepath.Rel(root, pwd); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s/%s works in %s, outside %s", s[0], s[1], pwd, root)
				}
			}
		})
	}
}

// TestWorkspaceKeptOnResume: a session finds its directory and files again
// after the sidecar restarted with a new goose connection (goose then runs
// session/load, which checks the directory exists), and gets it recreated
// when the volume lost it (an emptyDir replaced, a retention sweep).
func TestWorkspaceKeptOnResume(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	data := t.TempDir()
	f := shellGoose(t)
	sc := shellSidecar(t, f, data, root, workspace.ScopeSession)
	sc.createSession("alice", "s1")
	sc.say("alice", "s1", "write draft.md=v1")
	pwd := sc.say("alice", "s1", "pwd")
	sc.stop()

	sc2 := shellSidecar(t, f, data, root, workspace.ScopeSession)
	if got := sc2.say("alice", "s1", "ls"); got != "[draft.md]" {
		t.Fatalf("after restart alice/s1 sees %s", got)
	}
	if got := sc2.say("alice", "s1", "pwd"); got != pwd {
		t.Fatalf("after restart works in %s, before in %s", got, pwd)
	}
	gooseID := gooseSessionOf(t, sc2, "alice", "s1")
	if loads := f.Loads(); len(loads) != 1 || loads[0] != gooseID {
		t.Fatalf("goose loads %v, want the one session %s resumed", loads, gooseID)
	}
	sc2.stop()

	if err := os.RemoveAll(pwd); err != nil {
		t.Fatal(err)
	}
	sc3 := shellSidecar(t, f, data, root, workspace.ScopeSession)
	if got := sc3.say("alice", "s1", "ls"); got != "[]" {
		t.Fatalf("after the directory was lost alice/s1 sees %s", got)
	}
	if got := sc3.say("alice", "s1", "pwd"); got != pwd || gooseSessionOf(t, sc3, "alice", "s1") != gooseID {
		t.Fatalf("after the directory was lost: works in %s (was %s)", got, pwd)
	}
}

// TestWorkspaceScopeChangeMovesSessions: after the scope changed (which
// restarts the sidecar) a session resumes in the directory the new scope
// gives it: session/load carries it and goose records it (upstream
// prepare_session_for_activation). With the default emptyDir the old
// directory is gone by then, and goose would refuse to load the session in it.
func TestWorkspaceScopeChangeMovesSessions(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	data := t.TempDir()
	f := shellGoose(t)
	sc := shellSidecar(t, f, data, root, workspace.ScopeSession)
	sc.createSession("alice", "s1")
	old := sc.say("alice", "s1", "pwd")
	sc.stop()
	if err := os.RemoveAll(root); err != nil { // a new pod's emptyDir
		t.Fatal(err)
	}

	sc2 := shellSidecar(t, f, data, root, workspace.ScopeUser)
	want := filepath.Join(root, workspace.UsersDir, workspace.Name("alice"))
	if got := sc2.say("alice", "s1", "pwd"); got != want || got == old {
		t.Fatalf("after the scope change the session works in %s, want %s", got, want)
	}
	if loads := f.Loads(); len(loads) != 1 {
		t.Fatalf("goose loads %v, want the session resumed once", loads)
	}
}

func gooseSessionOf(t *testing.T, sc *sidecar, user, session string) string {
	t.Helper()
	code, body := sc.do(http.MethodGet, "/apps/"+appName+"/users/"+user+"/sessions/"+session, nil)
	var sess map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &sess) != nil {
		t.Fatalf("get session: %d %s", code, body)
	}
	id, _ := jpath(sess, "state", gooseagent.SessionIDStateKey(appName)).(string)
	if id == "" {
		t.Fatalf("no goose session in %v", sess["state"])
	}
	return id
}

func TestWorkspaceRemovedWithSession(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	f := shellGoose(t)
	sc := shellSidecar(t, f, t.TempDir(), root, workspace.ScopeSession)
	sc.createSession("alice", "s1")
	sc.createSession("alice", "s2")
	sc.say("alice", "s1", "write a.txt=1")
	sc.say("alice", "s2", "write b.txt=2")
	d1, d2 := sc.say("alice", "s1", "pwd"), sc.say("alice", "s2", "pwd")
	g1 := gooseSessionOf(t, sc, "alice", "s1")
	if code, body := sc.do(http.MethodDelete, "/apps/"+appName+"/users/alice/sessions/s1", nil); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	if _, err := os.Stat(d1); !os.IsNotExist(err) {
		t.Fatalf("deleted session's directory %s: %v", d1, err)
	}
	if _, ok := f.Session(g1); ok {
		t.Fatal("the deletion did not reach goose")
	}
	if got := sc.say("alice", "s2", "ls"); got != "[b.txt]" || d2 == d1 {
		t.Fatalf("the other session's directory: %s", got)
	}
}

// TestWorkspaceAttackIDs sends A2A messages whose contextId (the ADK session
// id, and part of the user id "A2A_USER_<contextId>") aims at the path. Each
// lands in its own directory below the workspace's sessions tree.
func TestWorkspaceAttackIDs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	f := shellGoose(t)
	sc := shellSidecar(t, f, t.TempDir(), root, workspace.ScopeSession)
	ids := []string{
		"..", "../..", "../../../../etc", "a/../../b", "/etc/passwd", `..\..`, ".hidden",
		"Case", "case", "CASE", "аdmin", "admin", "ａｄｍｉｎ", "e\u0301", "é",
		strings.Repeat("long", 300), strings.Repeat("long", 300) + "!",
	}
	for _, id := range ids {
		sc.a2aSend(t, id)
	}
	dirs := map[string]bool{}
	for _, p := range f.Prompts() {
		ss, ok := f.Session(p.SessionID)
		if !ok {
			t.Fatalf("no goose session %s", p.SessionID)
		}
		rel, err := filepath.Rel(filepath.Join(root, workspace.SessionsDir), ss.WorkingDir)
		if err != nil || strings.HasPrefix(rel, "..") || strings.Count(rel, string(filepath.Separator)) != 1 {
			t.Fatalf("a session works in %s, not one directory below %s/%s", ss.WorkingDir, root, workspace.SessionsDir)
		}
		if fi, err := os.Lstat(ss.WorkingDir); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v", ss.WorkingDir, err)
		}
		dirs[ss.WorkingDir] = true
	}
	if len(f.Prompts()) != len(ids) || len(dirs) != len(ids) {
		t.Fatalf("%d ids, %d prompts, %d distinct directories", len(ids), len(f.Prompts()), len(dirs))
	}
}

// TestWorkspaceOnOwningReplica: a session's directory is on the pod that
// owns the session, whichever pod a request for it reaches (peering
// forwards it), and its deletion through another pod removes it there.
func TestWorkspaceOnOwningReplica(t *testing.T) {
	roots := [2]string{filepath.Join(t.TempDir(), "ws0"), filepath.Join(t.TempDir(), "ws1")}
	rs := startReplicaSet(t, func(i int, cfg *server.Config) {
		cfg.Workspaces = newWorkspaces(t, roots[i], workspace.ScopeSession)
	})
	rs.pods[0].createSessionHere("alice", "s1")
	rs.pods[1].say("alice", "s1", "hello from the other pod")
	rs.pods[0].say("alice", "s1", "hello from the owner")
	prompts := rs.gooses[0].Prompts()
	if len(prompts) != 2 || len(rs.gooses[1].Prompts()) != 0 {
		t.Fatalf("prompts: %d on the owner's goose, %d on the other", len(prompts), len(rs.gooses[1].Prompts()))
	}
	ss, _ := rs.gooses[0].Session(prompts[0].SessionID)
	want := filepath.Join(roots[0], workspace.SessionsDir, workspace.Name("alice"), workspace.Name("s1"))
	if ss.WorkingDir != want || !isDir(want) {
		t.Fatalf("the session works in %s, want %s on the owner's volume", ss.WorkingDir, want)
	}
	if entries, _ := os.ReadDir(roots[1]); len(entries) != 0 {
		t.Fatalf("the other pod's workspace has %v", entries)
	}
	if code, body := rs.pods[1].do(http.MethodDelete, "/apps/"+appName+"/users/alice/sessions/s1", nil); code != http.StatusOK {
		t.Fatalf("delete through the other pod: %d %s", code, body)
	}
	if isDir(want) {
		t.Fatal("the owner kept the deleted session's directory")
	}
}

func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
