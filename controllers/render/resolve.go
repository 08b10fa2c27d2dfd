package render

import (
	"fmt"
	"strings"
)

// Lookup returns the data of a Secret or ConfigMap (Secret values decoded), or
// found=false when the object does not exist.
type Lookup func(kind RefKind, name string) (data map[string]string, found bool, err error)

// Resolve reads every reference of refs through lookup. Missing required
// objects or keys are reported in missing (sorted, human readable), not as
// an error: they are a state of the world the agent waits for.
func Resolve(refs []Ref, lookup Lookup) (values map[Ref]string, missing []string, err error) {
	values = map[Ref]string{}
	type obj struct {
		kind RefKind
		name string
	}
	cache := map[obj]map[string]string{}
	absent := map[obj]bool{}
	for _, r := range refs {
		o := obj{r.Kind, r.Name}
		data, ok := cache[o]
		if !ok && !absent[o] {
			d, found, lerr := lookup(r.Kind, r.Name)
			if lerr != nil {
				return nil, nil, fmt.Errorf("failed to get %s %s: %w", r.Kind, r.Name, lerr)
			}
			if found {
				cache[o], data, ok = d, d, true
			} else {
				absent[o] = true
			}
		}
		switch {
		case !ok:
			if !r.Optional {
				missing = append(missing, fmt.Sprintf("%s %q not found", r.Kind, r.Name))
			}
		default:
			v, has := data[r.Key]
			if !has {
				if !r.Optional {
					missing = append(missing, fmt.Sprintf("key %q not found in %s %q", r.Key, r.Kind, r.Name))
				}
				continue
			}
			values[r] = v
		}
	}
	missing = dedupe(missing)
	return values, missing, nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// MissingMessage joins missing references into one condition message.
func MissingMessage(missing []string) string {
	return "waiting for referenced objects: " + strings.Join(missing, "; ")
}
