package sessiondb

import (
	"encoding/json"
	"sync"
	"time"

	"google.golang.org/adk/session"

	"github.com/adk2goose/goose-operator/sidecar/internal/sessiondb/internal/storedstate"
)

// DefaultCacheBytes bounds a Cache made with NewCache(0).
const DefaultCacheBytes = 16 << 20

// Cache keeps, for each session the services sharing it last wrote, what
// reading it with its newest event only gives (a Get with NumRecentEvents
// 1, which the sidecar makes once per run): its state and update time as
// that write stored them, and its newest event as stored. Such a Get then
// does not read the database, whose read after a write goes back to the WAL
// (binding target: first event p50 at concurrency 1).
//
// A Cache is right only while the services sharing it are the only
// writers of their database, as the sidecar is of its own file. Writes
// change it in their transaction, under SQLite's write lock, so in the
// order they commit, and from what the transaction itself read and wrote.
// A write that changes app or user state, which every session of the app
// or user shows, empties it; a write whose commit fails drops its session,
// or empties the cache when it may have changed such state.
type Cache struct {
	mu       sync.Mutex
	entries  map[sessionKey]*cacheEntry
	bytes    int
	maxBytes int
}

type sessionKey struct{ app, user, id string }

// cacheEntry is a session as a Get with NumRecentEvents 1 reads it: its
// state per scope as stored (JSON), its update time, and its newest event,
// if it has one.
type cacheEntry struct {
	state   [3][]byte // session, app, user
	updated time.Time
	newest  *eventRow
	size    int
}

// NewCache returns an empty cache holding up to maxBytes of sessions
// (DefaultCacheBytes if 0 or less). A session larger than a sixteenth of
// that is not kept.
func NewCache(maxBytes int) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	return &Cache{entries: map[sessionKey]*cacheEntry{}, maxBytes: maxBytes}
}

// newestTime is the time of a cached session's newest event, zero when it
// has none; ok is false when the session is not cached.
func (c *Cache) newestTime(k sessionKey) (at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if ok && e.newest != nil {
		at = e.newest.timestamp
	}
	return at, ok
}

// written records a write of session k, in its transaction: st is the
// session's stored state after it, updated its update time, newest its
// newest event (nil: none). scopes is true when the write changed app or
// user state: the cache is emptied first.
func (c *Cache) written(k sessionKey, scopes bool, st scopedState, updated time.Time, newest *eventRow) {
	if c == nil {
		return
	}
	e := &cacheEntry{updated: updated, newest: newest}
	for i, m := range []map[string]any{st.session, st.app, st.user} {
		b, err := json.Marshal(m)
		if err != nil { // it was stored as JSON just now; not kept otherwise
			c.dropped(k, scopes)
			return
		}
		e.state[i] = b
		e.size += len(b)
	}
	if newest != nil {
		e.size += newest.size()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if scopes {
		c.emptyLocked()
	}
	c.putLocked(k, e)
}

// entryOverhead is what an entry costs beside its key's text and the
// bytes it holds: the entry (112 bytes), its map slot (the key's three
// string headers and a pointer, with the map's spare room) and the
// allocator's rounding of its slices. Without it, sessions with one short
// event took 1.6 times the bytes counted (TestCacheBytesAreItsMemory).
const entryOverhead = 224

// putLocked makes e session k's entry, unless it is too large to keep,
// making room for it.
func (c *Cache) putLocked(k sessionKey, e *cacheEntry) {
	c.removeLocked(k)
	e.size += entryOverhead + len(k.app) + len(k.user) + len(k.id)
	if e.size > c.maxBytes/16 {
		return
	}
	for c.bytes+e.size > c.maxBytes {
		for other := range c.entries { // any one: map order is random
			c.removeLocked(other)
			break
		}
	}
	c.entries[k] = e
	c.bytes += e.size
}

// stored is session k's entry as the last write left it, for a write that
// changes no state (see appended); ok is false when it is not cached.
func (c *Cache) stored(k sessionKey) (e *cacheEntry, ok bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok = c.entries[k]
	return e, ok
}

// appended records, in its transaction, a write of session k that changed
// no state and was made from prev, its entry (stored): the session's
// state stays as prev holds it, already encoded. updated is its update
// time now, newest its newest event. If prev is no longer the entry (a
// read dropped it, see session), the session stays out.
func (c *Cache) appended(k sessionKey, prev *cacheEntry, updated time.Time, newest *eventRow) {
	e := &cacheEntry{state: prev.state, updated: updated, newest: newest, size: newest.size()}
	for _, b := range prev.state {
		e.size += len(b)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[k] != prev {
		return
	}
	c.putLocked(k, e)
}

// dropped forgets session k after a write that failed or was not kept
// track of; scopes: the write may have changed app or user state.
func (c *Cache) dropped(k sessionKey, scopes bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if scopes {
		c.emptyLocked()
		return
	}
	c.removeLocked(k)
}

func (c *Cache) emptyLocked() {
	clear(c.entries)
	c.bytes = 0
}

func (c *Cache) removeLocked(k sessionKey) {
	if e, ok := c.entries[k]; ok {
		c.bytes -= e.size
		delete(c.entries, k)
	}
}

// session is the cached session k as Get with NumRecentEvents 1 returns
// it; ok is false when it is not cached. An entry that does not decode
// (it was encoded here, so it should) is dropped and read from the
// database instead.
func (c *Cache) session(k sessionKey) (s *storedSession, ok bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	s, err := e.session(k)
	if err != nil {
		c.mu.Lock()
		if c.entries[k] == e {
			c.removeLocked(k)
		}
		c.mu.Unlock()
		return nil, false
	}
	return s, true
}

// session decodes the entry as a read of the database decodes the same
// bytes, so what the caller gets is the same, fresh and its own.
func (e *cacheEntry) session(k sessionKey) (*storedSession, error) {
	var st scopedState
	for i, into := range []*map[string]any{&st.session, &st.app, &st.user} {
		var err error
		if *into, err = storedstate.Decode(e.state[i]); err != nil {
			return nil, err
		}
	}
	evs := []*session.Event{}
	if e.newest != nil {
		ev, err := e.newest.event()
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return &storedSession{app: k.app, user: k.user, id: k.id, events: evs, updatedAt: e.updated, state: st.merged()}, nil
}
