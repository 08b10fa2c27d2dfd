// Package workspace gives each ADK user or session its own goose working
// directory inside the agent's workspace volume.
//
// Layout under Root (the workspace volume, at the same path in the sidecar
// and the goose container):
//
//	agent scope:    Root                                   every session shares it
//	user scope:     Root/users/<name(user)>                one per ADK user
//	session scope:  Root/sessions/<name(user)>/<name(session)>
//
// A directory's path is a pure function of the scope, the user id and the
// session id, so a session finds the same directory when it resumes, after
// either container restarted, and on whichever replica serves it.
//
// ADK user and session ids are client input. Name turns one into a single
// path element that cannot traverse (no "/", never "." or ".."), stays
// readable (a sanitised lower-case prefix) and stays distinct for distinct ids
// (a hash of the exact id), also on file systems that fold case or rewrite
// Unicode: the whole name is lower-case ASCII.
//
// Every file operation goes through an os.Root, so a symbolic link planted in
// the volume (goose runs shell commands there) cannot make the sidecar create
// or delete anything outside it; a link where a workspace directory should be
// is refused.
//
// This separates work, not tenants: goose runs every session as the same
// user in one process, and its shell can leave its working directory.
package workspace

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Scope says which sessions share a working directory.
type Scope string

const (
	// ScopeAgent: every session of the agent works in the workspace root.
	ScopeAgent Scope = "agent"
	// ScopeUser: the sessions of one ADK user share a directory.
	ScopeUser Scope = "user"
	// ScopeSession: every ADK session has a directory of its own.
	ScopeSession Scope = "session"
)

// ParseScope checks a scope name.
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case ScopeAgent, ScopeUser, ScopeSession:
		return Scope(s), nil
	}
	return "", fmt.Errorf("unknown workspace scope %q: want agent, user or session", s)
}

// The two trees under Root. Both are swept whatever the current scope, so
// directories left by an earlier scope age out too.
const (
	UsersDir    = "users"
	SessionsDir = "sessions"
)

// dirMode: goose and the sidecar run as the same user.
const dirMode fs.FileMode = 0o750

// Config configures New.
type Config struct {
	// Root is the workspace volume's absolute path. Required.
	Root string
	// Scope defaults to ScopeSession.
	Scope Scope
	// Retention: Sweep removes user and session directories not used for
	// this long. Zero keeps them until their session is deleted.
	Retention time.Duration
	// SeedDir, when set, holds files copied into every directory this
	// package creates (a mounted ConfigMap: its "..data" entries are skipped).
	SeedDir string
	// Now is the clock; tests fake it. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Manager creates, tracks and removes workspace directories. It is safe for
// concurrent use.
type Manager struct {
	cfg  Config
	root *os.Root
	log  *slog.Logger

	// mu orders creation against sweeping, so a sweep cannot remove a
	// parent directory between MkdirAll's steps or a directory in use.
	mu     sync.Mutex
	inUse  map[string]int // relative dir -> open count
	closed bool
	// trashMu lets one caller at a time empty the trash.
	trashMu sync.Mutex
}

// New opens the workspace root, creating it if missing.
func New(cfg Config) (*Manager, error) {
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("failed to open workspace: root %q must be an absolute path", cfg.Root)
	}
	if cfg.Scope == "" {
		cfg.Scope = ScopeSession
	}
	if _, err := ParseScope(string(cfg.Scope)); err != nil {
		return nil, fmt.Errorf("failed to open workspace: %w", err)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("failed to open workspace: negative retention %s", cfg.Retention)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Root = filepath.Clean(cfg.Root)
	if err := os.MkdirAll(cfg.Root, dirMode); err != nil {
		return nil, fmt.Errorf("failed to create workspace root: %w", err)
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("failed to open workspace root: %w", err)
	}
	return &Manager{cfg: cfg, root: root, log: cfg.Logger, inUse: map[string]int{}}, nil
}

// Close releases the root. Directories stay.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.root.Close()
}

// Scope is the manager's scope.
func (m *Manager) Scope() Scope { return m.cfg.Scope }

// Retention is how long unused directories are kept; 0 is for ever.
func (m *Manager) Retention() time.Duration { return m.cfg.Retention }

// rel is the directory of (user, session) relative to Root; "." for agent scope.
func (m *Manager) rel(user, session string) string {
	switch m.cfg.Scope {
	case ScopeUser:
		return path.Join(UsersDir, Name(user))
	case ScopeSession:
		return path.Join(SessionsDir, Name(user), Name(session))
	}
	return "."
}

// Path is the absolute working directory of the session, as goose sees it.
// It does not touch the file system.
func (m *Manager) Path(user, session string) string {
	return filepath.Join(m.cfg.Root, filepath.FromSlash(m.rel(user, session)))
}

// Open makes sure the session's directory exists (seeding it when it is
// new), marks it used (see mark), and holds it in use until release, which
// marks it again, so a sweep leaves it alone meanwhile. Call it before
// every turn: goose refuses a session whose working directory is gone
// (upstream validate_absolute_cwd, on session/new and session/load alike),
// which happens after a retention sweep or when an emptyDir volume was
// replaced.
func (m *Manager) Open(_ context.Context, user, session string) (dir string, release func(), err error) {
	rel := m.rel(user, session)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", nil, errors.New("failed to open workspace: manager closed")
	}
	// marked: when rel was last marked used, as far as this turn knows.
	var marked time.Time
	if rel != "." {
		if marked, err = m.ensure(rel); err != nil {
			return "", nil, err
		}
		marked = m.mark(rel, marked)
	}
	m.inUse[rel]++
	var once sync.Once
	release = func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.inUse[rel]--; m.inUse[rel] <= 0 {
				delete(m.inUse, rel)
			}
			if rel != "." && !m.closed {
				m.mark(rel, marked)
			}
		})
	}
	return m.Path(user, session), release, nil
}

// markedRecently: a directory marked used this recently is not marked again
// (see mark).
const markedRecently = time.Minute

// mark records use of rel now, unless it was marked (at marked) within
// markedRecently, and returns when it was last marked. A directory's mark
// is then up to a minute older than its last use, which a sweep (of what
// was unused for Retention, at least an hour in a GooseAgent) does not
// notice, and back-to-back turns make no system call for it.
func (m *Manager) mark(rel string, marked time.Time) time.Time {
	now := m.cfg.Now()
	if now.Sub(marked) <= markedRecently {
		return marked
	}
	m.touch(rel)
	return now
}

// ensure makes sure rel and its parents are directories inside the root,
// creating (and seeding) what is missing, and returns when rel was last
// marked used (the zero time when it is new). Each element must be a real
// directory, not a link.
func (m *Manager) ensure(rel string) (used time.Time, err error) {
	// Most turns find their directory: looking costs fewer system calls
	// than trying to create it.
	fi, err := m.existingDir(rel)
	if err == nil {
		return fi.ModTime(), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, fmt.Errorf("failed to open workspace %s: %w", rel, err)
	}
	created, err := m.mkdir(rel)
	for try := 0; errors.Is(err, fs.ErrNotExist) && try < 3; try++ {
		// Another replica's sweep or delete removed a parent meanwhile
		// (a volume shared by replicas).
		created, err = m.mkdir(rel)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("failed to create workspace %s: %w", rel, err)
	}
	if created && m.cfg.SeedDir != "" {
		if err := m.seed(rel); err != nil {
			return time.Time{}, fmt.Errorf("failed to seed workspace %s: %w", rel, err)
		}
	}
	return time.Time{}, nil
}

// existingDir looks at rel and each directory above it, in order from the
// root, and returns rel's: an error wrapping fs.ErrNotExist when one is
// missing, another when one is not a directory.
func (m *Manager) existingDir(rel string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	for p := range prefixes(rel) {
		var err error
		if fi, err = m.isDir(p); err != nil {
			return nil, err
		}
	}
	return fi, nil
}

// mkdir creates rel and its parents inside the root and reports whether rel
// itself was new. Each element must be a real directory, not a link.
func (m *Manager) mkdir(rel string) (created bool, err error) {
	for p := range prefixes(rel) {
		err := m.root.Mkdir(p, dirMode)
		switch {
		case err == nil:
			created = p == rel
			continue
		case !errors.Is(err, fs.ErrExist):
			return false, err
		}
		if _, err := m.isDir(p); err != nil {
			return false, err
		}
	}
	return created, nil
}

// isDir is p's own file info (a link is not followed), and an error when p
// is not a directory.
func (m *Manager) isDir(p string) (fs.FileInfo, error) {
	fi, err := m.root.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s exists and is not a directory (%s)", p, fi.Mode().Type())
	}
	return fi, nil
}

// prefixes yields a, a/b, a/b/c for the relative path a/b/c.
func prefixes(rel string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i, c := range rel {
			if c == '/' && !yield(rel[:i]) {
				return
			}
		}
		yield(rel)
	}
}

// touch records use in the directory's modification time, which the sweep
// reads; a failure only shortens the directory's life, so it is logged.
func (m *Manager) touch(rel string) {
	now := m.cfg.Now()
	if err := m.root.Chtimes(rel, now, now); err != nil {
		m.log.Warn("failed to mark workspace used", "dir", rel, "error", err)
	}
}

// seed copies the regular files at the top of SeedDir into rel. A mounted
// ConfigMap shows its keys as links into a "..data" directory; those
// entries are skipped and the links followed.
func (m *Manager) seed(rel string) error {
	entries, err := os.ReadDir(m.cfg.SeedDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		src := filepath.Join(m.cfg.SeedDir, e.Name())
		fi, err := os.Stat(src)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := m.root.WriteFile(path.Join(rel, e.Name()), data, 0o640); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes the session's own directory (session scope only: a user's
// directory is shared by the user's other sessions and the root by all).
// Call it once the ADK session is deleted. A missing directory is no error.
func (m *Manager) Remove(_ context.Context, user, session string) error {
	if m.cfg.Scope != ScopeSession {
		return nil
	}
	rel := m.rel(user, session)
	if err := m.discardSession(rel); err != nil {
		return fmt.Errorf("failed to remove workspace %s: %w", rel, err)
	}
	return m.emptyTrash()
}

func (m *Manager) discardSession(rel string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("manager closed")
	}
	// Refuse to follow a link in place of the user's directory.
	fi, err := m.root.Lstat(path.Dir(rel))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (%s)", path.Dir(rel), fi.Mode().Type())
	}
	if err := m.discard(rel); err != nil {
		return err
	}
	// The user's directory goes with its last session; Remove fails on a
	// non-empty directory, which is fine.
	_ = m.root.Remove(path.Dir(rel))
	return nil
}

// TrashDir (in Root) holds directories on their way out: they are renamed
// into it under the manager's lock, which is quick, and deleted after it,
// so deleting a large directory holds up no turn.
const TrashDir = ".adk2goose-trash"

// trash makes sure TrashDir is a real directory (m.mu held).
func (m *Manager) trash() error {
	if err := m.root.Mkdir(TrashDir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := m.root.Lstat(TrashDir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", TrashDir, fi.Mode().Type())
	}
	return nil
}

// discard moves rel into the trash (m.mu held). A missing rel is no error.
func (m *Manager) discard(rel string) error {
	if err := m.trash(); err != nil {
		return err
	}
	err := m.root.Rename(rel, path.Join(TrashDir, rand.Text()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// emptyTrash deletes what discard moved there, also what an earlier process
// left. It runs without m.mu.
func (m *Manager) emptyTrash() error {
	m.trashMu.Lock()
	defer m.trashMu.Unlock()
	m.mu.Lock()
	err := m.trash()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("failed to empty workspace trash: %w", err)
	}
	names, err := m.list(TrashDir)
	if err != nil {
		return fmt.Errorf("failed to empty workspace trash: %w", err)
	}
	var errs []error
	for _, n := range names {
		if err := m.root.RemoveAll(path.Join(TrashDir, n)); err != nil {
			errs = append(errs, fmt.Errorf("failed to empty workspace trash: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Sweep removes user and session directories last used longer than
// Retention ago and not in use by this process, in both trees whatever the
// current scope. It returns how many it removed. With no retention it does
// nothing.
//
// On a volume shared by several replicas a sweep cannot see the others'
// open turns: a turn that creates no file in its directory for longer than
// Retention may lose it. Retention is therefore at least an hour.
func (m *Manager) Sweep(ctx context.Context) (int, error) {
	if m.cfg.Retention <= 0 {
		return 0, nil
	}
	removed, err := m.discardStale(ctx)
	return removed, errors.Join(err, m.emptyTrash(), ctx.Err())
}

func (m *Manager) discardStale(ctx context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, errors.New("failed to sweep workspaces: manager closed")
	}
	cutoff := m.cfg.Now().Add(-m.cfg.Retention)
	removed := 0
	var errs []error
	stale := func(rel string) bool {
		if m.inUse[rel] > 0 {
			return false
		}
		fi, err := m.root.Lstat(rel)
		return err == nil && fi.ModTime().Before(cutoff)
	}
	remove := func(rel string) {
		if err := m.discard(rel); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove workspace %s: %w", rel, err))
			return
		}
		removed++
		m.log.Info("removed unused workspace", "dir", rel, "retention", m.cfg.Retention.String())
	}

	// Only entries named as Name names them are considered: a volume that
	// served agent scope may hold someone's own "users" or "sessions".
	users, err := m.list(UsersDir)
	errs = append(errs, err)
	for _, u := range users {
		if ctx.Err() != nil {
			break
		}
		if rel := path.Join(UsersDir, u); isName(u) && stale(rel) {
			remove(rel)
		}
	}
	owners, err := m.list(SessionsDir)
	errs = append(errs, err)
	for _, u := range owners {
		if ctx.Err() != nil {
			break
		}
		if !isName(u) {
			continue
		}
		parent := path.Join(SessionsDir, u)
		fi, err := m.root.Lstat(parent)
		if err != nil || !fi.IsDir() {
			// Not ours to descend into (a link, a file): remove it when old.
			if stale(parent) {
				remove(parent)
			}
			continue
		}
		sessions, err := m.list(parent)
		errs = append(errs, err)
		for _, s := range sessions {
			if rel := path.Join(parent, s); isName(s) && stale(rel) {
				remove(rel)
			}
		}
		_ = m.root.Remove(parent) // only when empty
	}
	return removed, errors.Join(errs...)
}

// list names the entries of rel; a missing rel has none.
func (m *Manager) list(rel string) ([]string, error) {
	f, err := m.root.Open(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", rel, err)
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", rel, err)
	}
	return names, nil
}

// SweepInterval is how often Run sweeps for a retention: a tenth of it,
// between a minute and an hour.
func SweepInterval(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Minute), time.Hour)
}

// Run sweeps every interval until ctx is done. It does nothing without a
// retention.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	if m.cfg.Retention <= 0 || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("workspace sweep incomplete", "error", err)
			}
		}
	}
}

// prefixMax bounds the readable part of a name; the hash keeps it unique.
const prefixMax = 40

// hashEncoding is lower-case base32: names stay distinct on file systems
// that fold case.
var hashEncoding = base32.NewEncoding(hashAlphabet).WithPadding(base32.NoPadding)

const hashAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// hashLen is the length of Name's hash part.
const hashLen = 26

// isName tells whether a directory entry has the form Name gives.
func isName(s string) bool {
	i := len(s) - hashLen - 1
	if i < 1 || s[i] != '-' {
		return false
	}
	for _, c := range s[i+1:] {
		if !strings.ContainsRune(hashAlphabet, c) {
			return false
		}
	}
	return true
}

// Name maps an ADK user or session id to one safe path element: up to 40
// characters of the id lower-cased with everything but a-z, 0-9, '.', '-'
// and '_' replaced by '_' (leading dots and dashes dropped, so never hidden,
// "." , ".." or an option), then '-' and 26 characters of base32 SHA-256 of
// the exact id (128 bits). Distinct ids get distinct names however they
// differ: by case, by a character the prefix replaces, by a Unicode
// look-alike, or after the first 40 characters.
func Name(id string) string {
	sum := sha256.Sum256([]byte(id))
	var b strings.Builder
	n := 0
	for _, r := range id {
		if n == prefixMax {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + ('a' - 'A'))
		default:
			b.WriteByte('_')
		}
		n++
	}
	prefix := strings.TrimLeft(b.String(), ".-")
	if prefix == "" {
		prefix = "id"
	}
	return prefix + "-" + hashEncoding.EncodeToString(sum[:16])
}
