//go:build unix

package server_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used. On a
// shared machine it is far steadier than wall-clock figures.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
