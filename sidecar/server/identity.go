package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"
	adka2a "google.golang.org/adk/server/adka2a/v2"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"
	"github.com/adk2goose/goose-operator/sidecar/identity"
	"github.com/adk2goose/goose-operator/sidecar/server/internal/apppath"
)

const codeForbidden = "FORBIDDEN"

func (s *Server) authMode() string {
	switch {
	case s.cfg.Identity != nil:
		return "identity"
	case s.cfg.AuthToken != "":
		return identity.ModeToken
	}
	return "none"
}

// isAdmin reports a caller in one of the admin groups.
func (s *Server) isAdmin(c identity.Caller) bool { return c.In(s.cfg.AdminGroups) }

// ownUser refuses, in an identity mode, a request of a verified caller that
// names another ADK user than the caller (in its path or run body), and the
// routes that are about no one user (traces, evals, peers' queries) unless
// the caller is an admin. Requests without a caller pass: token mode, and
// a peer pod's own calls.
func (s *Server) ownUser(next http.Handler) http.Handler {
	if s.cfg.Identity == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := identity.CallerFrom(r.Context())
		if !ok || s.isAdmin(c) {
			next.ServeHTTP(w, r)
			return
		}
		user, named := requestUser(r)
		switch {
		case named && user != c.User:
			writeJSONError(w, r, http.StatusForbidden, codeForbidden,
				fmt.Sprintf("caller %q may not act for ADK user %q: use your own identity as the user id", c.User, user))
			return
		case !named && !userFree(r):
			writeJSONError(w, r, http.StatusForbidden, codeForbidden,
				fmt.Sprintf("%s %s is not about one user, so only admins may use it", r.Method, r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requestUser is the ADK user a request is about: the {user} of
// /apps/{app}/users/{user}/... (apppath.Parse) and /users/{user}/..., or a run's
// userId.
func requestUser(r *http.Request) (user string, named bool) {
	if req := runRequestOf(r); req != nil {
		return req.UserID, true
	}
	if r.URL.Path == LivePath {
		lq, _ := liveQueryOf(r)
		return lq.user, true
	}
	if _, user, _, _, ok := apppath.Parse(r.URL.EscapedPath()); ok {
		return user, user != ""
	}
	seg := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/dev"), "/")
	if len(seg) < 3 || seg[1] != "users" {
		return "", false
	}
	u, err := url.PathUnescape(seg[2])
	if err != nil {
		u = seg[2]
	}
	return u, true
}

// userFree reports the routes any verified caller may use that name no
// user: the app list and description, version, figures without user data,
// and A2A, whose tasks are scoped to their caller (callerInterceptor).
func userFree(r *http.Request) bool {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch p {
	case "/list-apps", "/version", "/metrics-info", "/stats", "/metrics", identity.WhoAmIPath, A2APathV1, A2APathV03:
		return true
	}
	seg := strings.Split(p, "/")
	// /dev/apps/{app} and /apps/{app}: the app itself.
	return (len(seg) == 4 && seg[1] == "dev" && seg[2] == "apps") || (len(seg) == 3 && seg[1] == "apps")
}

// whoAmI answers GET identity.WhoAmIPath.
func (s *Server) whoAmI(w http.ResponseWriter, r *http.Request) {
	c, ok := identity.CallerFrom(r.Context())
	if !ok {
		jsonhttp.Write(w, http.StatusOK, identity.WhoAmI{})
		return
	}
	jsonhttp.Write(w, http.StatusOK, identity.WhoAmI{Verified: true, User: c.User, Groups: c.Groups, Admin: s.isAdmin(c)})
}

// callerInterceptor makes the verified caller a2asrv's user: adka2a then
// runs the call as that ADK user instead of one made from the context id,
// and the task store records who made each task.
type callerInterceptor struct {
	a2asrv.PassthroughCallInterceptor
}

func (callerInterceptor) Before(ctx context.Context, cc *a2asrv.CallContext, _ *a2asrv.Request) (context.Context, any, error) {
	if c, ok := identity.CallerFrom(ctx); ok {
		cc.User = a2asrv.NewAuthenticatedUser(c.User, nil)
	}
	return ctx, nil, nil
}

// callerTasks is the task store with each task visible only to the ADK user
// it runs as (adka2a records it in the task's metadata), unless the caller
// is an admin or there is no verified caller: to anyone else it is not
// found. a2asrv's in-memory store filters lists by user but not gets.
type callerTasks struct {
	taskstore.Store
	admin func(identity.Caller) bool
}

func (t callerTasks) Get(ctx context.Context, id a2a.TaskID) (*taskstore.StoredTask, error) {
	st, err := t.Store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	c, ok := identity.CallerFrom(ctx)
	if !ok || t.admin(c) {
		return st, nil
	}
	if owner, _ := st.Task.Metadata[adka2a.ToA2AMetaKey("user_id")].(string); owner != c.User {
		return nil, a2a.ErrTaskNotFound
	}
	return st, nil
}
