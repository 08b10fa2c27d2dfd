//go:build !unix

package main

// startWithStackStart does nothing where there is no exec: the sidecar runs
// with the runtime's default goroutine stacks (see stackStartSetting).
func startWithStackStart() {}
