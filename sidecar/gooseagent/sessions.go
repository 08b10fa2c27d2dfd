package gooseagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/goose"
)

// DeleteSession forgets an ADK session that is being deleted, so that a
// session created later under the same id starts a fresh goose
// conversation: a pending tool confirmation is denied and its reply
// cancelled, the goose session is deleted from goose, and what the agent
// keeps in memory for the session is released. It waits for a running turn
// of the session to end. sess is the ADK session as it was before the
// deletion, whose state names the goose session after a restart; nil uses
// only what this process remembers.
//
// A goose session goose no longer has is not an error, nor is a goose that
// cannot delete sessions (goosed 1.38-1.41, goose.ErrUnsupported): its
// conversation stays in goose, unreachable from ADK.
//
// Programs usually let SessionService call it.
func (c *Controller) DeleteSession(ctx context.Context, key SessionKey, sess session.Session) error {
	return c.g.deleteSession(ctx, key, sess, nil)
}

// deleteSession does DeleteSession; deleteADK, when set, deletes the ADK
// session first, under the session's turn lock, and nothing else happens
// when it fails.
func (g *gooseAgent) deleteSession(ctx context.Context, key SessionKey, sess session.Session, deleteADK func(context.Context) error) error {
	e := g.entry(key)
	defer g.unuse(e)
	if err := e.acquire(ctx); err != nil {
		return fmt.Errorf("failed to wait for the running turn of session %q: %w", key.SessionID, err)
	}
	defer e.release()
	if deleteADK != nil {
		if err := deleteADK(ctx); err != nil {
			return err
		}
	}
	var ids []string
	add := func(id string) {
		if id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	const deleted = "cancelled because the ADK session was deleted"
	if p := g.pending(e); p != nil && g.claim(e, p, deleted) {
		g.deny(key, p, ErrorCodeCancelled, deleted)
		add(p.gooseID)
	}
	add(e.gooseID)
	if sess != nil {
		id, _ := g.storedGooseID(sess)
		add(id)
	}
	g.mu.Lock()
	e.gooseID, e.ready, e.unusedEarly, e.totals, e.resolved = "", false, false, nil, nil
	if g.sessions[key] == e && e.refs == 1 {
		delete(g.sessions, key)
	}
	g.mu.Unlock()

	var errs []error
	for _, id := range ids {
		errs = append(errs, g.deleteGooseSession(ctx, key, id, "its ADK session was deleted"))
	}
	return errors.Join(errs...)
}

// deleteGooseSession deletes goose session id of the ADK session key, for
// why (logged). A session goose no longer has, or a goose that cannot
// delete sessions (goosed 1.38-1.41), is not an error; once goose has said
// it cannot, it is not asked again.
func (g *gooseAgent) deleteGooseSession(ctx context.Context, key SessionKey, id, why string) error {
	if g.cannotDelete.Load() {
		g.unlistEarly(ctx, id) // nothing to try again
		return nil
	}
	err := g.cfg.Backend.DeleteSession(ctx, id)
	if err == nil || errors.Is(err, goose.ErrSessionNotFound) || errors.Is(err, goose.ErrUnsupported) {
		g.unlistEarly(ctx, id)
	}
	switch {
	case err == nil, errors.Is(err, goose.ErrSessionNotFound):
		g.cfg.Logger.InfoContext(ctx, "deleted goose session", "adk_session", key.SessionID, "goose_session", id, "why", why)
		return nil
	case errors.Is(err, goose.ErrUnsupported):
		if !g.cannotDelete.Swap(true) {
			g.cfg.Logger.InfoContext(ctx, "goose cannot delete sessions; the conversations of deleted or unused sessions stay in goose",
				"adk_session", key.SessionID, "goose_session", id)
		}
		return nil
	default:
		return fmt.Errorf("failed to delete goose session %q: %w", id, err)
	}
}

// unlistEarly takes a deleted goose session off EarlySessions, if listed.
func (g *gooseAgent) unlistEarly(ctx context.Context, id string) {
	if es := g.cfg.EarlySessions; es != nil {
		if err := es.RemoveEarly(context.WithoutCancel(ctx), id); err != nil {
			g.cfg.Logger.WarnContext(ctx, "failed to unlist a deleted goose session started early", "goose_session", id, "error", err)
		}
	}
}

// DeleteLeftEarly deletes from goose the sessions EarlySessions listed when
// this process started (ids): goose sessions that a process which died
// before its Close had started early and no turn had taken. It returns the
// ids not deleted because goose was unavailable, to be tried again; other
// failures are logged, and those sessions stay listed for the next start.
func (c *Controller) DeleteLeftEarly(ctx context.Context, ids []string) ([]string, error) {
	for i, id := range ids {
		err := c.g.deleteGooseSession(ctx, SessionKey{}, id, "started early by an adk2goose process that stopped before deleting it")
		switch {
		case err == nil:
		case errors.Is(err, goose.ErrUnavailable), ctx.Err() != nil:
			return ids[i:], err
		default:
			c.g.cfg.Logger.WarnContext(ctx, "goose session started early by an earlier process stays in goose", "goose_session", id, "error", err)
		}
	}
	return nil, nil
}

// deleteUnusedEarly deletes the goose sessions started early that no turn
// has taken (sessionEntry.unusedEarly): nothing could reach them once this
// process ends. Close calls it, with goose still running when the sidecar
// drains before goose stops. An entry whose lock is held is skipped: a turn
// (which takes the goose session) or an ADK session deletion has it.
func (g *gooseAgent) deleteUnusedEarly(ctx context.Context) error {
	type unused struct {
		key SessionKey
		e   *sessionEntry
	}
	var us []unused
	g.mu.Lock()
	for k, e := range g.sessions {
		if e.unusedEarly {
			e.refs++ // not forgotten meanwhile
			us = append(us, unused{k, e})
		}
	}
	g.mu.Unlock()
	defer func() {
		for _, u := range us {
			g.unuse(u.e)
		}
	}()
	var errs []error
	for i, u := range us {
		err := g.deleteIfUnusedEarly(ctx, u.key, u.e)
		if err == nil {
			continue
		}
		errs = append(errs, err)
		if errors.Is(err, goose.ErrUnavailable) {
			// goose is gone (a goose serve stopped before this sidecar):
			// one error, not one per session.
			if n := len(us) - i - 1; n > 0 {
				errs = append(errs, fmt.Errorf("%d more goose sessions started early stay in goose", n))
			}
			break
		}
	}
	return errors.Join(errs...)
}

// deleteIfUnusedEarly deletes e's goose session if it is still one started
// early that no turn took; an entry whose lock is held is left alone.
func (g *gooseAgent) deleteIfUnusedEarly(ctx context.Context, key SessionKey, e *sessionEntry) error {
	if !e.tryAcquire() {
		return nil
	}
	defer e.release()
	g.mu.Lock()
	unused := e.unusedEarly
	e.unusedEarly = false // deleted now, or kept: nothing forgets it after Close
	g.mu.Unlock()
	if !unused {
		return nil
	}
	if err := g.deleteGooseSession(ctx, key, e.gooseID, "its ADK session ran no turn before shutdown"); err != nil {
		return err
	}
	e.gooseID, e.ready, e.totals = "", false, nil
	return nil
}

// SessionService returns svc whose Delete also calls DeleteSession for this
// agent, after the ADK session is gone, and whose Create starts the goose
// session early when Config.StartGooseOnCreate is set. Hand it to whatever
// creates and deletes sessions (adk-go's adkrest server, your own code);
// several goose agents of one tree wrap it in turn. A goose session that
// cannot be deleted is logged, not returned: the ADK session is gone and a
// new one under its id starts a fresh goose conversation all the same.
func (c *Controller) SessionService(svc session.Service) session.Service {
	return &linkedService{Service: svc, c: c}
}

// linkedService ties the ADK sessions' lifecycle to their goose sessions.
type linkedService struct {
	session.Service
	c *Controller
}

func (s *linkedService) Create(ctx context.Context, req *session.CreateRequest) (*session.CreateResponse, error) {
	resp, err := s.Service.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	if g := s.c.g; g.cfg.StartGooseOnCreate && resp != nil && resp.Session != nil {
		g.startEarly(SessionKey{AppName: resp.Session.AppName(), UserID: resp.Session.UserID(), SessionID: resp.Session.ID()}, resp.Session)
	}
	return resp, nil
}

// earlyStartTimeout bounds a goose session start nobody waits for yet.
const earlyStartTimeout = 2 * time.Minute

// earlyStartGrace is how long Close lets early starts in flight finish
// before it cancels them: goose usually answers in a moment, and a session
// whose start finished can be deleted, where one cancelled midway may stay
// in goose under an id nobody learned. A var for the tests.
var earlyStartGrace = 5 * time.Second

// startEarly starts the goose session of a newly created ADK session in the
// background. The session's turn lock is taken before it returns, so a
// first turn waits for this start rather than making a second goose
// session; if the lock is taken already, a turn is starting it anyway.
func (g *gooseAgent) startEarly(key SessionKey, sess session.Session) {
	if id, _ := g.storedGooseID(sess); id != "" {
		return // created with a goose session named in its state
	}
	e := g.entry(key)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.unuse(e)
		return
	}
	if !e.tryAcquire() {
		g.mu.Unlock()
		g.unuse(e)
		return
	}
	g.starts.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.starts.Done()
		defer g.unuse(e)
		defer e.release()
		if e.gooseID != "" {
			return
		}
		ctx, cancel := context.WithTimeout(g.startsStop, earlyStartTimeout)
		defer cancel()
		opts := g.cfg.StartOptions
		if ws := g.cfg.Workspaces; ws != nil {
			dir, release, err := ws.Open(ctx, key.UserID, key.SessionID)
			if err != nil {
				g.cfg.Logger.WarnContext(ctx, "failed to prepare working directory for an early goose session start; the first turn will start it",
					"adk_session", key.SessionID, "error", err)
				return
			}
			defer release()
			opts.WorkingDir = dir
		}
		s, err := g.cfg.Backend.StartSession(ctx, opts)
		if err != nil {
			g.cfg.Logger.WarnContext(ctx, "failed to start goose session early; the first turn will start it",
				"adk_session", key.SessionID, "error", err)
			return
		}
		if es := g.cfg.EarlySessions; es != nil {
			// Listed before any turn can take it (this goroutine holds the
			// session's lock).
			if err := es.AddEarly(context.WithoutCancel(ctx), s.ID); err != nil {
				g.cfg.Logger.WarnContext(ctx, "failed to list a goose session started early; it stays in goose if this process dies before it is used",
					"adk_session", key.SessionID, "goose_session", s.ID, "error", err)
			}
		}
		// The first turn writes the mapping into the ADK session state.
		e.gooseID, e.ready, e.totals = s.ID, true, &goose.Usage{}
		g.mu.Lock()
		e.unusedEarly = true
		g.mu.Unlock()
		g.cfg.Logger.InfoContext(ctx, "started goose session",
			"adk_session", key.SessionID, "goose_session", s.ID, "working_dir", opts.WorkingDir, "early", true)
	}()
}

func (s *linkedService) Delete(ctx context.Context, req *session.DeleteRequest) error {
	var sess session.Session
	got, err := s.Get(ctx, &session.GetRequest{AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID})
	if err == nil && got != nil {
		sess = got.Session
	}
	deleted := false
	err = s.c.g.deleteSession(ctx, SessionKey{AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID}, sess,
		func(ctx context.Context) error {
			if err := s.Service.Delete(ctx, req); err != nil {
				return err
			}
			deleted = true
			return nil
		})
	if err != nil && deleted {
		s.c.g.cfg.Logger.WarnContext(ctx, "ADK session deleted, its goose session not", "adk_session", req.SessionID, "error", err)
		return nil
	}
	return err
}
