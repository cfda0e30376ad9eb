package bench

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/locktest"
	"github.com/asynqlock/asynqlock/internal/redistest"
	"github.com/asynqlock/asynqlock/redlock"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// BenchmarkCompletionRecordBytes measures a lock node's memory per
// completion record (the middleware's "once"):
// records written through Acquire, RecordCompletion and Release on one real
// redis-server, ids shaped as the middleware's (recordName), used_memory read before and after. "hot": every record on one
// resource (one sorted set, past its compact encoding); "cold": one record
// per resource (a set each). Run with -benchtime=20000x.
func BenchmarkCompletionRecordBytes(b *testing.B) {
	for _, shape := range []string{"hot", "cold"} {
		b.Run(shape, func(b *testing.B) {
			nodes := redistest.StartCluster(b, 1)
			rc := newRedlock(b, nodes, redlock.WithNodeTimeout(time.Second)) // memory, not time: patient on a loaded machine
			raw := nodes.Clients(b)[0].(*redis.Client)
			ctx := context.Background()
			before := usedMemory(b, raw)
			b.ResetTimer()
			for i := range b.N {
				res := "task:stock:adjust:SKU-HOT"
				if shape == "cold" {
					res = fmt.Sprintf("task:stock:adjust:SKU-%06d", i)
				}
				id := recordName(uuid.NewString())
				l, err := rc.Acquire(ctx, res, 10*time.Second, locktest.WithCompletion(id, time.Hour))
				if err != nil {
					b.Fatal(err)
				}
				if err := locktest.RecordCompletion(l, 0); err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(usedMemory(b, raw)-before)/float64(b.N), "bytes/record")
		})
	}
}

// recordName shapes a record's id as the middleware does: 128 bits of a
// hash, in 22 characters.
func recordName(taskID string) string {
	sum := sha256.Sum256([]byte(taskID))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}
