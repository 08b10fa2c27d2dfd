package workspace

import "testing"

func TestIsNameRecognisesOnlyNames(t *testing.T) {
	for _, id := range []string{"", "..", "alice", "Ünïcode", "x-abcdefghijklmnopqrstuvwxyz"} {
		if n := Name(id); !isName(n) {
			t.Errorf("isName(Name(%q) = %q) is false", id, n)
		}
	}
	for _, s := range []string{"", "README", "notes", "-abcdefghijklmnopqrstuvwxyz", "a-ABCDEFGHIJKLMNOPQRSTUVWXYZ", "a-abcdefghijklmnopqrstuvwxy1", "a_abcdefghijklmnopqrstuvwxyz"} {
		if isName(s) {
			t.Errorf("isName(%q) is true", s)
		}
	}
}
