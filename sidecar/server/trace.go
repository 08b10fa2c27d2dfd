package server

import (
	"net/http"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of the sidecar's HTTP spans.
const TracerName = "github.com/adk2goose/goose-operator/sidecar/server"

// tracedPaths are the routes that run turns: only they get a server span.
var tracedPaths = []string{"/run", "/run_sse", A2APathV1, A2APathV03}

// traceTurns starts a server span for each request that runs a turn, as a
// child of the client's W3C traceparent when it sent one, so that an ADK
// program's trace continues through adk2goose (and adk-go's invoke_agent
// span, and the goose spans under it). The ResponseWriter is not wrapped:
// streams flush as before.
func traceTurns(next http.Handler, tp trace.TracerProvider) http.Handler {
	tracer := tp.Tracer(TracerName)
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !slices.Contains(tracedPaths, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", rec.status))
		if rec.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(rec.status))
		}
	})
}

// statusRecorder notes the status; Unwrap keeps http.ResponseController
// (flushes, write deadlines) reaching the real writer.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// tracerProvider is tp, or a provider that makes no spans when tracing is off.
func tracerProvider(tp *sdktrace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}
