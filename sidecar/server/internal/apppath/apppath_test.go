package apppath

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzAppPath: Parse reads any client's URL path without a panic, and the
// names it reads back are the ones a client escaped into the path.
func FuzzAppPath(f *testing.F) {
	for _, s := range [][4]string{
		{"/apps/goose/users/alice/sessions/s1", "goose", "alice", "s1"},
		{"/dev/apps/goose/users/alice/sessions/s1/events/e", "a b", "bob%2F", "s/2"},
		{"/apps/goose", "", "", ""},
		{"/apps/%zz/users/%/sessions/", "é", "../x", "?q"},
		{"//apps", "apps", "users", "sessions"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, path, app, user, session string) {
		if u, err := url.Parse(path); err == nil {
			a, us, s, isResource, ok := Parse(u.EscapedPath())
			if !ok && (a != "" || us != "" || s != "" || isResource) {
				t.Fatalf("%q: not an app path, yet read %q %q %q %v", path, a, us, s, isResource)
			}
			if isResource && s == "" {
				t.Fatalf("%q: a session resource without a session", path)
			}
		}
		// A path a client built from the names reads back as the names.
		p := "/apps/" + url.PathEscape(app) + "/users/" + url.PathEscape(user) + "/sessions/" + url.PathEscape(session)
		u, err := url.Parse(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		a, us, s, isResource, ok := Parse(u.EscapedPath())
		wantSession, wantResource := session, session != ""
		if session == "" && strings.HasSuffix(p, "/") {
			wantResource = false
		}
		if !ok || a != app || us != user || s != wantSession || isResource != wantResource {
			t.Fatalf("%q read as %q %q %q %v %v; want %q %q %q", p, a, us, s, isResource, ok, app, user, session)
		}
	})
}
