package stats

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestPollsSpreadOverTheInterval: agents polled at the same moment get
// their next polls spread over the interval, each between half an interval
// and one and a half away, and an agent's later polls are an interval apart.
func TestPollsSpreadOverTheInterval(t *testing.T) {
	const interval = 30 * time.Second
	now := time.Date(2026, 12, 3, 10, 0, 7, 0, time.UTC)
	perSecond := map[int]int{}
	for i := range 1000 {
		a := types.NamespacedName{Namespace: "agents", Name: fmt.Sprintf("agent-%04d", i)}
		d := untilSlot(now, interval, a)
		if d < interval/2 || d > interval*3/2 {
			t.Fatalf("%s: next poll in %s, want within [%s, %s]", a, d, interval/2, interval*3/2)
		}
		if again := untilSlot(now.Add(d), interval, a); again != interval {
			t.Fatalf("%s: the poll after next in %s, want %s", a, again, interval)
		}
		perSecond[int(now.Add(d).Unix()%30)]++
	}
	for s := range 30 {
		if n := perSecond[s]; n < 10 || n > 70 {
			t.Errorf("second %d of the interval has %d of 1000 polls, want about 33", s, n)
		}
	}
}
