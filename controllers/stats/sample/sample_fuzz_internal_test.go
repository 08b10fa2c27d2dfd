package sample

import "testing"

// A pod's /stats answer is outside input to the manager: any body gives
// figures or an error, never negative counts, and figures that add up into
// an agent's totals as they are.
func FuzzDecodeSample(f *testing.F) {
	for _, s := range []string{
		`{"appName":"goose","sessions":{"total":12,"active":2,"inFlight":1},"tokens":{"input":48211,"output":9120,"total":57331}}`,
		`{"sessions":{"total":-1}}`, `{"tokens":{"total":9223372036854775807}}`, `null`, `[]`, ``,
		`{"budget":{"limits":{"period":"day","totalTokens":10},"periodStart":"2026-11-29T00:00:00Z","used":{"input":-3}}}`,
		`{"budget":{"periodStart":"not a time"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := Decode(body)
		if err != nil {
			return
		}
		if s.Sessions.Total < 0 || s.Sessions.Active < 0 || s.Tokens.Input < 0 || s.Tokens.Output < 0 || s.Tokens.Total < 0 {
			t.Fatalf("%q: negative counts %+v", body, s)
		}
		if b := s.Budget; b != nil && (b.Used.Input < 0 || b.Used.Output < 0 || b.Used.Total < 0) {
			t.Fatalf("%q: negative budget use %+v", body, b.Used)
		}
		var tot Totals
		tot.Add(s)
		if tot.TokensTotal != s.Tokens.Total || tot.SessionsTotal != s.Sessions.Total || (s.Budget == nil) != (tot.Budget == nil) {
			t.Fatalf("%q: totals %+v of one sample %+v", body, tot, s)
		}
	})
}
