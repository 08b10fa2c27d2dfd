package acp

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// traceMeta is the W3C trace context of ctx as ACP _meta keys (traceparent,
// tracestate: MCP SEP-414), from which goose continues its own spans
// (crates/goose/src/otel/trace_context.rs); nil when ctx holds no span.
func traceMeta(ctx context.Context) map[string]any {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	meta := make(map[string]any, len(carrier))
	for k, v := range carrier {
		meta[k] = v
	}
	return meta
}
