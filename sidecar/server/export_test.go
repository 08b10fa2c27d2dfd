package server

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsOf is s's Prometheus registry, every series it serves on /metrics.
func MetricsOf(s *Server) prometheus.Collector { return s.metrics.reg }

// EarlyListed is what s's usage.db lists of the goose sessions started early.
func EarlyListed(ctx context.Context, s *Server) ([]string, error) { return s.usage.ListEarly(ctx) }
