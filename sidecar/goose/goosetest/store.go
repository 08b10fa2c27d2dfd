package goosetest

import "time"

// ServeStore is the content of a fake goose serve's session store, so that a
// fake started again (a restarted pod in the e2e suite) knows the sessions of
// the one before, as goose does from its sessions.db under GOOSE_PATH_ROOT
// (shared/reference/goose-acp.md §3: data in <root>/data). The caller keeps
// it (Snapshot on stop, WithServeRestore on start); goose writes as it goes.
type ServeStore struct {
	Seq      int                  `json:"seq"`
	Sessions []ServeStoredSession `json:"sessions"`
}

// ServeStoredSession is one stored session and its conversation.
type ServeStoredSession struct {
	ID, WorkingDir, Title string
	Mode, Provider, Model string
	Created, Updated      time.Time
	Messages              int
	InputTokens           int64
	OutputTokens          int64
	Cost                  float64
	CostKnown             bool
	History               []ServeStoredMessage
}

// ServeStoredMessage is one message of a stored conversation.
type ServeStoredMessage struct{ Role, MessageID, Text string }

// WithServeRestore starts the fake with the sessions of a store.
func WithServeRestore(st ServeStore) ServeOption {
	return func(f *Serve) {
		f.seq = max(f.seq, st.Seq)
		for _, s := range st.Sessions {
			ss := &serveSession{
				id: s.ID, cwd: s.WorkingDir, title: s.Title, created: s.Created, updated: s.Updated,
				messages: s.Messages, mode: s.Mode, provider: s.Provider, model: s.Model,
				accIn: s.InputTokens, accOut: s.OutputTokens, accCost: s.Cost, costKnown: s.CostKnown,
			}
			for _, m := range s.History {
				ss.history = append(ss.history, serveHistory{role: m.Role, messageID: m.MessageID, text: m.Text})
			}
			f.sessions[s.ID] = ss
		}
	}
}

// Snapshot returns the fake's sessions as a store.
func (s *Serve) Snapshot() ServeStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServeStore{Seq: s.seq}
	for _, ss := range s.sessions {
		out := ServeStoredSession{
			ID: ss.id, WorkingDir: ss.cwd, Title: ss.title, Mode: ss.mode, Provider: ss.provider, Model: ss.model,
			Created: ss.created, Updated: ss.updated, Messages: ss.messages,
			InputTokens: ss.accIn, OutputTokens: ss.accOut, Cost: ss.accCost, CostKnown: ss.costKnown,
		}
		for _, h := range ss.history {
			out.History = append(out.History, ServeStoredMessage{Role: h.role, MessageID: h.messageID, Text: h.text})
		}
		st.Sessions = append(st.Sessions, out)
	}
	return st
}
