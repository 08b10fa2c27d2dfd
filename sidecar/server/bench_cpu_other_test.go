//go:build !unix

package server_test

import "time"

// processCPU is unknown here; the benchmark then reports 0.
func processCPU() time.Duration { return 0 }
