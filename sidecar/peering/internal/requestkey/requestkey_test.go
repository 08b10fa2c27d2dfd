package requestkey

import (
	"net/url"
	"testing"
)

func TestSessionPath(t *testing.T) {
	for path, want := range map[string]struct {
		user, session string
		list, ok      bool
	}{
		"/apps/goose/users/u/sessions/s":                 {"u", "s", false, true},
		"/apps/goose/users/u/sessions/s/":                {"u", "s", false, true},
		"/apps/goose/users/u/sessions/s/artifacts/a.txt": {"u", "s", false, true},
		"/apps/goose/users/u%2Fv/sessions/s%20t":         {"u/v", "s t", false, true},
		"/apps/goose/users/u/sessions":                   {"u", "", true, true},
		"/apps/goose/users/u/sessions/":                  {"u", "", true, true},
		"/apps/other/users/u/sessions/s":                 {},
		"/apps/goose/users//sessions/s":                  {},
		"/apps/goose/users/u/session/s":                  {},
		"/apps/goose/users/u":                            {},
		"/run_sse":                                       {},
	} {
		u, err := url.ParseRequestURI("http://x" + path)
		if err != nil {
			t.Fatal(err)
		}
		user, session, list, ok := SessionPath(u.EscapedPath(), "goose")
		if user != want.user || session != want.session || list != want.list || ok != want.ok {
			t.Errorf("%s: %q %q %v %v, want %+v", path, user, session, list, ok, want)
		}
	}
}

// FuzzKeys: no request body or path makes key extraction panic, and what
// is found names a session (with its user), a context or a task: one.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{
		`{"userId":"u","sessionId":"s"}`,
		`{"method":"GetTask","params":{"id":"t"}}`,
		`{"method":"SendMessage","params":{"message":{"contextId":"c"}}}`,
		`/apps/goose/users/u/sessions/s`,
		`{"params":{"message":null}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if contextID, taskID, ok := A2A(b); ok && (contextID == "") == (taskID == "") {
			t.Fatalf("context %q, task %q from %q", contextID, taskID, b)
		}
		u := url.URL{Path: string(b), RawPath: string(b)}
		if user, session, list, ok := SessionPath(u.EscapedPath(), "goose"); ok && (user == "" || (session == "") != list) {
			t.Fatalf("path %q: %q %q %v", b, user, session, list)
		}
	})
}
