// Package sqlite stands in for github.com/glebarez/go-sqlite (go.mod
// replaces it with this empty package). The gorm dialector
// github.com/glebarez/sqlite imports that driver only to register it as
// "sqlite"; the sidecar registers modernc.org/sqlite under that name
// instead (internal/sqlitedsn), whose statements stay prepared. Linking
// both would register the name twice, which panics. A replace holds only
// in this module's builds: the library (sidecar/gooseagent) links no SQLite
// driver, but another module importing sidecar/server would need the same
// replace.
package sqlite
