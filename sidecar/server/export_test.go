package server

// RunDecodes is how many run bodies the package has decoded.
func RunDecodes() int64 { return runDecodes.Load() }
