package server

import (
	"errors"
	"net/http"

	"github.com/adk2goose/goose-operator/sidecar/gooseagent"
)

// checkConfirmations rejects a run whose functionResponse parts do not
// answer the session's pending tool confirmation, and reports one whose
// parts do (answers: the run continues the turn that asked). adkrest cannot
// turn an agent error into a 4xx (it streams `event: error` under 200, or
// 500 for /run) and would first persist the bogus answer in the session
// history; checking here gives the client a real status and keeps the
// history clean. The agent checks again when the turn starts (the
// confirmation may time out in between), which is also what A2A and
// in-process runners rely on.
func (s *Server) checkConfirmations(req *RunRequest) (answers bool, he *httpError) {
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
			status := http.StatusBadRequest
			if errors.As(err, &ce) && ce.Stale {
				status = http.StatusConflict
			}
			return false, &httpError{status: status, code: gooseagent.ErrorCodeConfirmationNotPending, msg: err.Error()}
		}
		if _, err := gooseagent.ParseConfirmation(fr.Response); err != nil {
			return false, &httpError{status: http.StatusBadRequest, code: gooseagent.ErrorCodeBadRequest, msg: err.Error()}
		}
		answers = true
	}
	return answers, nil
}
