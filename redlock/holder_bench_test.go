package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/internal/redistest"
)

// BenchmarkHolderInfo compares an acquire and release round trip on three
// real redis-server nodes with and without the holder in the lock value
// (host, pid and a task-like name), side by side in one run:
//
//	go test -run '^$' -bench BenchmarkHolderInfo -count 6 ./redlock/
func BenchmarkHolderInfo(b *testing.B) {
	nodes := redistest.StartCluster(b, 3)
	ctx := context.Background()
	for _, on := range []bool{false, true} {
		b.Run("holder="+strconv.FormatBool(on), func(b *testing.B) {
			c, err := NewFromURLs(nodes.URLs(), WithNodeTimeout(time.Second), withHolderInfo(on))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			hctx := ContextWithHolder(ctx, "stock:adjust 8d3c2a9e-5f4b-4c1e-9a7d-2b6f0e1c3d4a")
			i := 0
			for b.Loop() {
				l, err := c.TryAcquire(hctx, "sku-"+strconv.Itoa(i%64), 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
