package middleware

import (
	"fmt"
	"runtime/debug"
	"slices"
)

// asynqModule is the module whose task layout parking writes.
const asynqModule = "github.com/hibiken/asynq"

// asynqTested are the asynq versions the suite's parking tests run against;
// parking writes asynq's own keys, no API, so WithBroker refuses any other
// (docs/guide/HOTKEYS.md). Add a version once the suite passed with it.
var asynqTested = []string{"v0.26.0"}

// linkedAsynq returns the asynq version this program is built with ("" when
// the build carries no module information).
func linkedAsynq() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == asynqModule {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

// checkAsynq refuses version v unless parking was tested against it; ""
// (no module information, as in a test binary) is let through.
func checkAsynq(v string) error {
	if v == "" || slices.Contains(asynqTested, v) {
		return nil
	}
	return fmt.Errorf("middleware: WithBroker: parking moves tasks between asynq's own keys, a layout tested with %s %v only, "+
		"and this program is built with %s %q: require %s %s in go.mod, or leave WithBroker out (busy tasks are then requeued on a timer)",
		asynqModule, asynqTested, asynqModule, v, asynqModule, asynqTested[len(asynqTested)-1])
}
