package stats

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
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

// TestParkOrWakeTriggersAPoll: the watch passes an update that parks or
// wakes an agent (polling stops and starts again) and no other status write.
func TestParkOrWakeTriggersAPoll(t *testing.T) {
	agent := func(parked metav1.ConditionStatus, sessions int64) *agentsv1alpha1.GooseAgent {
		a := &agentsv1alpha1.GooseAgent{}
		a.Status.Sessions.Total = sessions
		if parked != "" {
			a.Status.Conditions = []metav1.Condition{{Type: agentsv1alpha1.ConditionParked, Status: parked}}
		}
		return a
	}
	for _, c := range []struct {
		name     string
		old, new *agentsv1alpha1.GooseAgent
		want     bool
	}{
		{"park", agent(metav1.ConditionFalse, 1), agent(metav1.ConditionTrue, 1), true},
		{"wake", agent(metav1.ConditionTrue, 1), agent(metav1.ConditionFalse, 1), true},
		{"first park", agent("", 1), agent(metav1.ConditionTrue, 1), true},
		{"figures only", agent(metav1.ConditionFalse, 1), agent(metav1.ConditionFalse, 2), false},
		{"still parked", agent(metav1.ConditionTrue, 1), agent(metav1.ConditionTrue, 1), false},
	} {
		if got := parkChanged.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: passed %v, want %v", c.name, got, c.want)
		}
	}
}
