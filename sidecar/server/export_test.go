package server

import "github.com/prometheus/client_golang/prometheus"

// RunDecodes is how many run bodies the package has decoded.
func RunDecodes() int64 { return runDecodes.Load() }

// MetricsOf is s's Prometheus registry, every series it serves on /metrics.
func MetricsOf(s *Server) prometheus.Collector { return s.metrics.reg }
