package redlock

import (
	"context"
	"time"

	"github.com/asynqlock/asynqlock/internal/lockhook"
)

// init hands internal/lockadmin the operator calls and the tuning knobs
// that are not part of the public API.
func init() {
	lockhook.Nodes = func(c any) int { return len(c.(*Client).nodes) }
	lockhook.PingNodes = func(c any, ctx context.Context) ([]lockhook.NodeStatus, error) {
		return c.(*Client).pingNodes(ctx)
	}
	lockhook.Scan = func(c any, ctx context.Context, prefix string) ([]string, []error, error) {
		return c.(*Client).scan(ctx, prefix)
	}
	lockhook.ForceRelease = func(c any, ctx context.Context, resource, token string) (int, error) {
		return c.(*Client).forceRelease(ctx, resource, token)
	}
	lockhook.LocalQueue = func(on bool) any { return withLocalQueue(on) }
	lockhook.BatchWindow = func(d time.Duration) any { return withBatchWindow(d) }
	lockhook.InspectOnly = func() any { return Option(func(c *config) { c.inspectOnly = true }) }
}
