package server

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
	"github.com/adk2goose/goose-operator/sidecar/gooseagent/confirmation"
	"github.com/adk2goose/goose-operator/sidecar/server/internal/runrequest"
)

// checkConfirmations rejects a run whose functionResponse parts do not
// answer the session's pending tool confirmation, and reports one whose
// parts do (answers: the run continues the turn that asked). adkrest cannot
// turn an agent error into a 4xx (it streams `event: error` under 200, or
// 500 for /run) and would first persist the bogus answer in the session
// history; checking here gives the client a real status and keeps the
// history clean. The agent checks again when the turn starts (the
// confirmation may time out in between), which is also what A2A and
// in-process runners rely on. An answer to a confirmation the session never
// asked is a 400; to one it asked that is no longer pending, a 409.
func (s *Server) checkConfirmations(ctx context.Context, req *runrequest.Request) (answers bool, he *httpError) {
	if req.NewMessage == nil {
		return false, nil
	}
	key := gooseagent.SessionKey{AppName: req.AppName, UserID: req.UserID, SessionID: req.SessionID}
	for _, p := range req.NewMessage.Parts {
		if p == nil || p.FunctionResponse == nil {
			continue
		}
		fr := p.FunctionResponse
		if err := s.control.CheckConfirmation(key, fr.ID); err != nil {
			var ce *gooseagent.ConfirmationError
			if !errors.As(err, &ce) {
				return false, &httpError{status: http.StatusBadRequest, code: gooseagent.ErrorCodeConfirmationNotPending, msg: err.Error()}
			}
			if !ce.Stale && s.askedInSession(ctx, key, fr.ID) {
				// Asked, and no longer held: the agent forgot the session
				// while it was idle (and with it how the confirmation
				// ended), or adk2goose restarted since.
				ce.Stale, ce.Reason = true, "adk2goose restarted or let the idle session go since it was asked; send a new message"
			}
			status := http.StatusBadRequest
			if ce.Stale {
				status = http.StatusConflict
			}
			return false, &httpError{status: status, code: gooseagent.ErrorCodeConfirmationNotPending, msg: ce.Error()}
		}
		if _, err := confirmation.Parse(fr.Response); err != nil {
			return false, &httpError{status: http.StatusBadRequest, code: gooseagent.ErrorCodeBadRequest, msg: err.Error()}
		}
		answers = true
	}
	return answers, nil
}

// askedInSession reports whether the session's history holds the tool
// confirmation call id, that is whether the session did ask it. Only a
// rejected answer gets here, so loading the whole history is rare.
func (s *Server) askedInSession(ctx context.Context, key gooseagent.SessionKey, id string) bool {
	resp, err := s.sessions.Get(ctx, &session.GetRequest{AppName: key.AppName, UserID: key.UserID, SessionID: key.SessionID})
	if err != nil {
		return false
	}
	for ev := range resp.Session.Events().All() {
		if ev.Content == nil {
			continue
		}
		for _, p := range ev.Content.Parts {
			if fc := p.FunctionCall; fc != nil && fc.ID == id && fc.Name == gooseagent.ConfirmationFunctionName {
				return true
			}
		}
	}
	return false
}
