package middleware

import (
	"testing"
	"time"
)

// TestFlappingCallsLogOneOutage: a node that fails every other call, a few
// milliseconds apart, is one outage (one Warn), not a Warn and Info pair
// per call; it ends at the first call that works a settle time after the
// last failure. Control: without a settle time the same calls flap.
func TestFlappingCallsLogOneOutage(t *testing.T) {
	const settle = 5 * time.Second
	for _, tc := range []struct {
		settle           time.Duration
		wantDown, wantUp int
	}{{settle, 1, 1}, {0, 10, 10}} {
		var st failState
		downs, ups := 0, 0
		count := func(c stateChange) {
			switch c {
			case stateDown:
				downs++
			case stateUp:
				ups++
			}
		}
		at := time.Unix(1000, 0)
		for i := range 20 { // fail, work, fail, work, ... 3ms apart
			at = at.Add(3 * time.Millisecond)
			count(st.record(i%2 == 0, at, tc.settle))
		}
		if tc.settle > 0 && ups != 0 {
			t.Fatalf("settle %v: %d recoveries logged while still flapping", tc.settle, ups)
		}
		count(st.record(false, at.Add(settle), tc.settle)) // quiet since
		count(st.record(false, at.Add(settle+time.Second), tc.settle))
		if downs != tc.wantDown || ups != tc.wantUp {
			t.Errorf("settle %v: %d Warn and %d Info lines, want %d and %d", tc.settle, downs, ups, tc.wantDown, tc.wantUp)
		}
	}
}
