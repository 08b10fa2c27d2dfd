package servicehost

import (
	"strings"
	"testing"
)

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Host
		err  bool
	}{
		{in: "helper", want: Host{Name: "helper"}},
		{in: "helper:8080", want: Host{Name: "helper"}},
		{in: "helper.team", want: Host{Name: "helper", Namespace: "team"}},
		{in: "Helper.Team.svc:8080", want: Host{Name: "helper", Namespace: "team"}},
		{in: "helper.team.svc.cluster.local", want: Host{Name: "helper", Namespace: "team"}},
		{in: "helper.team.svc.cluster.local.:80", want: Host{Name: "helper", Namespace: "team"}},
		{in: "helper.team.svc.corp.example", want: Host{Name: "helper", Namespace: "team"}},
		{in: "10.96.0.12:8080", want: Host{IP: "10.96.0.12"}},
		{in: "[fd00::1]:8080", want: Host{IP: "fd00::1"}},
		{in: "fd00::1", want: Host{IP: "fd00::1"}},
		{in: "", err: true},
		{in: ":8080", err: true},
		{in: "helper.example.com", err: true},
		{in: ".team", err: true},
		{in: "helper..svc", err: true},
	} {
		got, err := Parse(tc.in)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// FuzzParseHost: any Host header is read without a panic, and what it
// names is an address, or a name without dots (and a namespace).
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"helper", "helper.team.svc.cluster.local:8080", "[::1]:80", "10.0.0.1", "a..b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		h, err := Parse(in)
		if err != nil {
			return
		}
		if h.IP == "" && (h.Name == "" || strings.Contains(h.Name, ".") || strings.Contains(h.Namespace, ".")) {
			t.Fatalf("Parse(%q) = %+v", in, h)
		}
	})
}
