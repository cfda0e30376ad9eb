package middleware

import "time"

// failState is one kind of call's failing state, logged once per change
// (brokerState, releaseState). It is guarded by mw.mu.
type failState struct {
	failing  bool
	lastFail time.Time
}

// stateChange is what a call's outcome did to a failing state.
type stateChange int

const (
	stateSame stateChange = iota
	stateDown             // it started failing
	stateUp               // it works again
)

// recoverySettle is how long a failing state must see no failure before a
// call that works ends it. A slow node whose calls time out now and then
// fails one task's release and serves the next: without it, that node
// would log Warn and Info pairs milliseconds apart. A variable for tests
// that count the lines of one outage and its end.
var recoverySettle = 5 * time.Second

// flip records a call's outcome in st and says how the state changed.
func (m *mw) flip(st *failState, fails bool) stateChange {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return st.record(fails, now, recoverySettle)
}

// record is flip's rule: the first failure turns the state down; a success
// at least settle after the last failure turns it up.
func (st *failState) record(fails bool, now time.Time, settle time.Duration) stateChange {
	switch {
	case fails:
		st.lastFail = now
		if !st.failing {
			st.failing = true
			return stateDown
		}
	case st.failing && now.Sub(st.lastFail) >= settle:
		st.failing = false
		return stateUp
	}
	return stateSame
}
