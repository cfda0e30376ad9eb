package middleware

import "github.com/asynqlock/asynqlock/statelog"

// failState is one kind of call's failing state (brokerState,
// releaseState), logged once per change through statelog.
type failState = statelog.State

// recoverySettle is how long a failing state must see no failure before a
// call that works ends it (statelog.Settle): a slow node whose calls time
// out now and then would otherwise log Warn and Info pairs milliseconds
// apart. A variable for tests that count the lines of one outage and its end.
var recoverySettle = statelog.Settle

// settleStates gives m's failing states the settle time.
func (m *mw) settleStates() {
	for _, st := range []*failState{&m.promoteErr, &m.parkErr, &m.releaseErr} {
		st.Settle = recoverySettle
	}
}
