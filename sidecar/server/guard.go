package server

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/adk2goose/goose-operator/internal/jsonhttp"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/server/internal/apppath"
	"github.com/adk2goose/goose-operator/sidecar/server/internal/runrequest"
)

// Codes of the JSON error answers ({"error", "code", "detail"}) this
// server gives before adkrest or a2asrv see a request.
const (
	codeBadRequest      = "BAD_REQUEST"
	codeAppNotFound     = "APP_NOT_FOUND"
	codeSessionNotFound = "SESSION_NOT_FOUND"
	codeSessionExists   = "SESSION_EXISTS"
	codeSessionBusy     = "SESSION_BUSY"
	codeDraining        = "DRAINING"
)

// httpError is a JSON error answer.
type httpError struct {
	status    int
	code, msg string
}

// guardRuns guards /run and /run_sse on their way to adkrest (next): client
// mistakes, including answers to tool confirmations that are not pending,
// get a 4xx with a JSON reason here, where adkrest would answer text/plain,
// or 500 after having stored the user message; the run takes the session's
// turn; and a run that would start a turn while the token budget is spent
// gets 429. adkrest is handed the canonical encoding of the run request
// decodeRuns decoded. Other requests pass.
func (s *Server) guardRuns(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if req := runRequestOf(r); req != nil {
			s.guardRun(w, r, req, next)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) guardRun(w http.ResponseWriter, r *http.Request, req *runrequest.Request, next http.Handler) {
	if req.AppName != s.cfg.AppName {
		writeJSONError(w, r, http.StatusNotFound, codeAppNotFound, s.unknownApp(req.AppName))
		return
	}
	release, ok := s.takeTurn(w, r, gooseagent.SessionKey{AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID})
	if !ok {
		return
	}
	defer release()
	// Checked while holding the turn: of two answers to one confirmation
	// sent at once, the second then finds it answered (409) instead of
	// reaching the history beside the first.
	answersConfirmation, he := s.checkConfirmations(r.Context(), req)
	if he != nil {
		writeJSONError(w, r, he.status, he.code, he.msg)
		return
	}
	ctx := runContext(r.Context(), req.AppName, req.UserID, req.SessionID)
	// Loaded here once for the run (see sessionService.Get).
	_, err := s.sessions.Get(ctx, &session.GetRequest{AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID})
	switch {
	case errors.Is(err, session.ErrNotFound):
		writeJSONError(w, r, http.StatusNotFound, codeSessionNotFound,
			fmt.Sprintf("session %q of user %q not found: create it first (POST /apps/%s/users/%s/sessions)", req.SessionID, req.UserID, req.AppName, url.PathEscape(req.UserID)))
		return
	case err != nil:
		s.log.Error("failed to load a session before a run; letting the runner answer", "error", err)
	}
	defer func() {
		if err := s.sessions.flush(sessionID{req.AppName, req.UserID, req.SessionID}); err != nil {
			s.log.Error("failed to store a run's user message", "session", req.SessionID, "error", err)
		}
	}()
	// An answer to a pending confirmation continues a turn already running.
	if !answersConfirmation && s.refuseRunOverBudget(w) {
		return
	}
	canonical, err := withCanonicalBody(ctx, r, req)
	if err != nil {
		writeJSONError(w, r, http.StatusInternalServerError, statusCode(http.StatusInternalServerError), err.Error())
		return
	}
	next.ServeHTTP(w, canonical)
}

// guardSessions answers ADK REST requests for another app with 404 (adkrest
// would create its sessions, then fail their runs with 500), gives the
// session writes outside runs (create with an id, PATCH, DELETE) the
// session's turn, and answers a create of an existing id with 409 as ADK
// Python's server does, where adkrest answers 500 with SQLite's UNIQUE
// constraint error.
func (s *Server) guardSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app, user, session, isResource, ok := apppath.Parse(r.URL.EscapedPath())
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if app != s.cfg.AppName {
			writeJSONError(w, r, http.StatusNotFound, codeAppNotFound, s.unknownApp(app))
			return
		}
		if !isResource || (r.Method != http.MethodPost && r.Method != http.MethodPatch && r.Method != http.MethodDelete) {
			next.ServeHTTP(w, r)
			return
		}
		release, ok := s.takeTurn(w, r, gooseagent.SessionKey{AppName: app, UserID: user, SessionID: session})
		if !ok {
			return
		}
		defer release()
		if r.Method == http.MethodPost {
			exists, err := s.OwnsSession(r.Context(), user, session)
			if err != nil {
				s.log.Error("failed to look up a session before creating it", "error", err)
			}
			if exists {
				writeJSONError(w, r, http.StatusConflict, codeSessionExists, "Session already exists: "+session)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) unknownApp(app string) string {
	return fmt.Sprintf("app %q not found: this server serves %q (GET /list-apps)", app, s.cfg.AppName)
}

// takeTurn waits for the session's turn (turnGate). When it cannot have it
// the request is answered (409 when the wait ran out; nothing when the
// client went away) and ok is false.
func (s *Server) takeTurn(w http.ResponseWriter, r *http.Request, k gooseagent.SessionKey) (release func(), ok bool) {
	release, err := s.turns.acquire(r.Context(), k, s.cfg.TurnWait)
	switch {
	case err == nil:
		return release, true
	case errors.Is(err, errDraining):
		// Another pod, or this one's replacement, takes it.
		w.Header().Set("Retry-After", "2")
		writeJSONError(w, r, http.StatusServiceUnavailable, codeDraining, err.Error()+"; retry shortly")
	case r.Context().Err() == nil:
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, r, http.StatusConflict, codeSessionBusy,
			fmt.Sprintf("session %q is busy with another turn that did not end within %s; retry when it has", k.SessionID, s.cfg.TurnWait))
	}
	return nil, false
}

// writeJSONError answers {"error": msg, "code": code, "detail": msg}: adk-go
// servers' JSON errors carry "error", FastAPI-based ADK servers' "detail",
// and clients of either read their own. A request whose body was not read
// whole gets Connection: close, so net/http sends the answer at once
// instead of first draining what the client is still sending.
func writeJSONError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if _, read := bodyBytes(r); hasBody(r) && !read {
		w.Header().Set("Connection", "close")
	}
	jsonhttp.Write(w, status, map[string]string{"error": msg, "code": code, "detail": msg})
}

// jsonErrors rewrites the error answers of the handlers behind it (adkrest
// and the peer router answer text/plain through http.Error, or nothing) as
// JSON errors, so that every client mistake reads the same on every route.
// Successful answers and streams pass through untouched.
func jsonErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrorWriter{ResponseWriter: w}
		next.ServeHTTP(jw, r)
		jw.finish(r)
	})
}

type jsonErrorWriter struct {
	http.ResponseWriter
	wrote  bool
	status int
	body   *bytes.Buffer // an error being rewritten
}

func (j *jsonErrorWriter) WriteHeader(status int) {
	if j.wrote {
		return
	}
	j.wrote = true
	if status >= http.StatusBadRequest && !isJSON(j.Header().Get("Content-Type")) {
		j.status, j.body = status, &bytes.Buffer{}
		return
	}
	j.ResponseWriter.WriteHeader(status)
}

func (j *jsonErrorWriter) Write(p []byte) (int, error) {
	if !j.wrote {
		j.WriteHeader(http.StatusOK)
	}
	if j.body != nil {
		return j.body.Write(p)
	}
	return j.ResponseWriter.Write(p)
}

// Flush lets streams through; an error being rewritten is sent at the end.
// A flush sends the header, so it counts as writing it: a later Write must
// not write it again (net/http logs "superfluous response.WriteHeader call"
// once per /run_sse otherwise, as adkrest flushes before its first event).
func (j *jsonErrorWriter) Flush() {
	if !j.wrote {
		j.WriteHeader(http.StatusOK)
	}
	if j.body == nil {
		_ = http.NewResponseController(j.ResponseWriter).Flush()
	}
}

func (j *jsonErrorWriter) Unwrap() http.ResponseWriter { return j.ResponseWriter }

func (j *jsonErrorWriter) finish(r *http.Request) {
	if j.body == nil {
		return
	}
	msg := strings.TrimSpace(j.body.String())
	if msg == "" {
		msg = http.StatusText(j.status)
	}
	h := j.Header()
	h.Del("Content-Length")
	h.Del("X-Content-Type-Options")
	writeJSONError(j.ResponseWriter, r, j.status, statusCode(j.status), msg)
}

// statusCode names a status as the codes above do: 404 NOT_FOUND.
func statusCode(status int) string {
	return strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_"))
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
