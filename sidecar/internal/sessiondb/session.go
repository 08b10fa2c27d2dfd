package sessiondb

import (
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/adk/session"
)

// storedSession is a session as Get, Create and List return it, and the
// copy AppendEvent writes through: AppendEvent adds the event and its state
// delta to it, and moves its update time, as adk-go's database service does
// with its own (unexported) session type.
type storedSession struct {
	app, user, id string

	mu        sync.RWMutex
	events    []*session.Event
	state     map[string]any
	updatedAt time.Time
}

func (s *storedSession) ID() string      { return s.id }
func (s *storedSession) AppName() string { return s.app }
func (s *storedSession) UserID() string  { return s.user }

func (s *storedSession) State() session.State { return &state{mu: &s.mu, m: s.state} }

func (s *storedSession) Events() session.Events {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return events(slices.Clone(s.events))
}

func (s *storedSession) LastUpdateTime() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.updatedAt
}

// add appends ev, whose state delta (temp: keys too: they live for the
// invocation) goes into the session's state; the event kept drops its
// temp: keys, as the stored one does.
func (s *storedSession) add(ev *session.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Actions.StateDelta != nil {
		if s.state == nil {
			s.state = map[string]any{}
		}
		maps.Copy(s.state, ev.Actions.StateDelta)
	}
	s.events = append(s.events, withoutTempState(ev))
}

func (s *storedSession) setUpdated(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updatedAt = t
}

// withoutTempState is ev without the temp: keys of its state delta (ev
// itself when it has none).
func withoutTempState(ev *session.Event) *session.Event {
	kept := 0
	for k := range ev.Actions.StateDelta {
		if !strings.HasPrefix(k, session.KeyPrefixTemp) {
			kept++
		}
	}
	if kept == len(ev.Actions.StateDelta) {
		return ev
	}
	c := *ev
	c.Actions.StateDelta = make(map[string]any, kept)
	for k, v := range ev.Actions.StateDelta {
		if !strings.HasPrefix(k, session.KeyPrefixTemp) {
			c.Actions.StateDelta[k] = v
		}
	}
	return &c
}

type events []*session.Event

func (e events) All() iter.Seq[*session.Event] { return slices.Values(e) }
func (e events) Len() int                      { return len(e) }

func (e events) At(i int) *session.Event {
	if i < 0 || i >= len(e) {
		return nil
	}
	return e[i]
}

// state is a session's state under the session's lock.
type state struct {
	mu *sync.RWMutex
	m  map[string]any
}

func (s *state) Get(key string) (any, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.m[key]
	if !ok {
		return nil, session.ErrStateKeyNotExist
	}
	return v, nil
}

func (s *state) Set(key string, value any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = value
	return nil
}

func (s *state) All() iter.Seq2[string, any] {
	s.mu.RLock()
	c := maps.Clone(s.m)
	s.mu.RUnlock()
	return maps.All(c)
}

// scopedState is a state map split as it is stored: app: and user: keys
// (without their prefix) in their own tables, the rest with the session;
// temp: keys are never stored.
type scopedState struct{ app, user, session map[string]any }

func splitState(m map[string]any) scopedState {
	s := scopedState{app: map[string]any{}, user: map[string]any{}, session: map[string]any{}}
	for k, v := range m {
		if rest, ok := strings.CutPrefix(k, session.KeyPrefixApp); ok {
			s.app[rest] = v
		} else if rest, ok := strings.CutPrefix(k, session.KeyPrefixUser); ok {
			s.user[rest] = v
		} else if !strings.HasPrefix(k, session.KeyPrefixTemp) {
			s.session[k] = v
		}
	}
	return s
}

// scoped reports whether s has app or user keys, which every session of
// the app or the user shows.
func (s scopedState) scoped() bool { return len(s.app) > 0 || len(s.user) > 0 }

// merged is the state a session shows: its own keys, and the app's and
// the user's with their prefixes.
func (s scopedState) merged() map[string]any {
	m := make(map[string]any, len(s.app)+len(s.user)+len(s.session))
	maps.Copy(m, s.session)
	for k, v := range s.app {
		m[session.KeyPrefixApp+k] = v
	}
	for k, v := range s.user {
		m[session.KeyPrefixUser+k] = v
	}
	return m
}
