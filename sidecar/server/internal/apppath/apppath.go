// Package apppath reads the ADK REST paths under an app, /apps/{app}/... and
// /dev/apps/{app}/...: the app, user and session they name.
package apppath

import (
	"net/url"
	"strings"
)

// Parse splits /apps/{app}/... and /dev/apps/{app}/..., given escaped (as
// url.URL.EscapedPath gives it); user is set for
// /apps/{app}/users/{user}[/...], session for
// /apps/{app}/users/{user}/sessions/{session}[/...], and isResource when the
// path ends at the session.
func Parse(escapedPath string) (app, user, session string, isResource, ok bool) {
	p := strings.TrimSuffix(escapedPath, "/")
	p = strings.TrimPrefix(p, "/dev")
	seg := strings.Split(p, "/")
	if len(seg) < 3 || seg[0] != "" || seg[1] != "apps" {
		return "", "", "", false, false
	}
	unescape := func(s string) string {
		u, err := url.PathUnescape(s)
		if err != nil {
			return s
		}
		return u
	}
	app = unescape(seg[2])
	if len(seg) >= 5 && seg[3] == "users" {
		user = unescape(seg[4])
	}
	if len(seg) >= 7 && seg[3] == "users" && seg[5] == "sessions" && seg[6] != "" {
		session = unescape(seg[6])
		isResource = len(seg) == 7
	}
	return app, user, session, isResource, true
}
