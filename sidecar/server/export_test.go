package server

import "github.com/prometheus/client_golang/prometheus"

// MetricsOf is s's Prometheus registry, every series it serves on /metrics.
func MetricsOf(s *Server) prometheus.Collector { return s.metrics.reg }
