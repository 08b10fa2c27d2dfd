package main

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/adk/telemetry"
)

// setupTracing builds the process's TracerProvider and makes it the global
// one (adk-go makes its spans with the global provider). adk-go's telemetry
// package reads the standard environment: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (with OTEL_EXPORTER_OTLP_HEADERS and
// the rest) adds an OTLP/HTTP exporter, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES name the resource, and the SDK reads
// OTEL_TRACES_SAMPLER(_ARG). Without an endpoint nothing is exported; spans
// then only feed the ADK web UI's trace view. The returned function flushes
// and stops the exporters.
func setupTracing(ctx context.Context) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	var opts []telemetry.Option
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		opts = append(opts, telemetry.WithResource(resource.NewSchemaless(attribute.String("service.name", "adk2goose"))))
	}
	providers, err := telemetry.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to set up tracing: %w", err)
	}
	tp := providers.TracerProvider
	if tp == nil { // no exporter configured
		tp = sdktrace.NewTracerProvider()
		providers.TracerProvider = tp
	}
	providers.SetGlobalOtelProviders()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp, providers.Shutdown, nil
}
