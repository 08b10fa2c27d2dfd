//go:build unix

package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

// startWithStackStart executes the program again, as the same process,
// with adaptivestackstart=0 added to GODEBUG (see stackStartSetting): the
// runtime reads that setting only as a process starts. It returns when
// GODEBUG has the setting already, or when the exec failed; the sidecar
// then runs with the runtime's default.
func startWithStackStart() {
	godebug, added := withStackStart(os.Getenv("GODEBUG"))
	if !added {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
		err = syscall.Exec(exe, os.Args, append(env, "GODEBUG="+godebug))
	}
	fmt.Fprintf(os.Stderr, "adk2goose: failed to start again with GODEBUG=%s, running with the runtime's default goroutine stacks: %v\n", godebug, err)
}
