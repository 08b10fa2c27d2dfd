package gooseagent

import "time"

// SetEarlyStartGrace sets how long Close lets early starts finish, until
// the test ends.
func SetEarlyStartGrace(t interface{ Cleanup(func()) }, d time.Duration) {
	old := earlyStartGrace
	earlyStartGrace = d
	t.Cleanup(func() { earlyStartGrace = old })
}
