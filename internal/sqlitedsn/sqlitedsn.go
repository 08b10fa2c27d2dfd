// Package sqlitedsn builds the DSN every SQLite file of the sidecar is opened
// with, and registers the driver ("sqlite").
package sqlitedsn

import (
	"net/url"
	"path/filepath"

	// Pure-Go SQLite (modernc.org/sqlite underneath): the same driver adk-go's
	// database session service is tested with, so one driver, no cgo.
	_ "github.com/glebarez/go-sqlite"
)

// Driver is the database/sql driver name to open DSN with.
const Driver = "sqlite"

// DSN builds a DSN for the glebarez driver. WAL lets readers run beside the
// single writer, busy_timeout waits out short write locks, and immediate
// transactions avoid the lock-upgrade deadlock that busy_timeout cannot
// resolve.
func DSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	return "file:" + filepath.ToSlash(path) + "?" + q.Encode()
}
