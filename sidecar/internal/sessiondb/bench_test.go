package sessiondb_test

import (
	"testing"

	"google.golang.org/adk/session"
	"google.golang.org/genai"
)

// services are the two session services on the same schema, side by side.
var services = []struct {
	name string
	open func(testing.TB) session.Service
}{
	{"adk-go", func(tb testing.TB) session.Service {
		tb.Helper()
		s, _ := openADK(tb)
		return s
	}},
	{"sessiondb", func(tb testing.TB) session.Service {
		tb.Helper()
		s, _ := openOurs(tb)
		return s
	}},
}

// BenchmarkAppendEvent appends an answer, as a run's last write does.
func BenchmarkAppendEvent(b *testing.B) {
	for _, svc := range services {
		b.Run(svc.name, func(b *testing.B) {
			s := svc.open(b)
			cr, err := s.Create(b.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				ev := session.NewEventWithContext(b.Context(), "inv-1")
				ev.Author = "goose"
				ev.Content = genai.NewContentFromText("an answer of a few words", genai.RoleModel)
				if err := s.AppendEvent(b.Context(), cr.Session, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGetRecent loads a session of 100 events with its last one, as a
// run starts.
func BenchmarkGetRecent(b *testing.B) {
	for _, svc := range services {
		b.Run(svc.name, func(b *testing.B) {
			s := svc.open(b)
			cr, err := s.Create(b.Context(), &session.CreateRequest{AppName: "app", UserID: "u", SessionID: "s", State: map[string]any{"k": "v"}})
			if err != nil {
				b.Fatal(err)
			}
			for range 100 {
				ev := session.NewEventWithContext(b.Context(), "inv-1")
				ev.Author = "goose"
				ev.Content = genai.NewContentFromText("an answer of a few words", genai.RoleModel)
				if err := s.AppendEvent(b.Context(), cr.Session, ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Get(b.Context(), &session.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
