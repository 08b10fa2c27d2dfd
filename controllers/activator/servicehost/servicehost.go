// Package servicehost reads the Host header of a request the activator
// holds: the agent Service it was sent to. It is a package of its own so
// that its fuzz target builds without the manager's dependencies, which
// slow Go's coverage-guided fuzzing more than tenfold.
package servicehost

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Host is what a Host header names: an address, or a Service's name with
// or without its namespace.
type Host struct {
	IP              string
	Name, Namespace string
}

// Parse reads a Host header as clients call a Service: NAME, NAME.NS,
// NAME.NS.svc or NAME.NS.svc.<cluster domain>, or its ClusterIP, each with
// or without a port.
func Parse(hostport string) (Host, error) {
	h := hostport
	if name, _, err := net.SplitHostPort(hostport); err == nil {
		h = name
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" {
		return Host{}, errors.New("the request names no host")
	}
	if ip := net.ParseIP(h); ip != nil {
		return Host{IP: ip.String()}, nil
	}
	labels := strings.Split(h, ".")
	for _, l := range labels[:min(len(labels), 2)] {
		if l == "" {
			return Host{}, fmt.Errorf("host %q names no agent's Service", h)
		}
	}
	switch {
	case len(labels) == 1:
		return Host{Name: labels[0]}, nil
	case len(labels) == 2 || labels[2] == "svc":
		return Host{Name: labels[0], Namespace: labels[1]}, nil
	}
	return Host{}, fmt.Errorf("host %q names no agent's Service", h)
}
