package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/middleware"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestWorkerRevivesTasksLeftParkedInTheArchive: a task parked on its last
// retry whose parker stopped (archived with a park's last error, 17 minutes
// ago) is moved back by the middleware's archive sweep, which the workers'
// handlers run once they ran a task of the queue, and runs once, with two
// workers sweeping; a task archived by a failure stays archived. Control: a
// second move of the completed task runs it again, so the count could show
// a double move.
func TestWorkerRevivesTasksLeftParkedInTheArchive(t *testing.T) {
	f := newFixture(t)
	opt, err := asynq.ParseRedisURI(f.broker.URL())
	if err != nil {
		t.Fatal(err)
	}
	archive(t, opt)

	var mu sync.Mutex
	runs, ran := map[string]int{}, map[int]bool{}
	for i := range 2 {
		w, err := New(f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Handle("report", asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			mu.Lock()
			runs[id]++
			ran[i] = true
			mu.Unlock()
			return nil
		}), middleware.ByField("sku"))
		if err != nil {
			t.Fatal(err)
		}
		start(t, w)
	}
	c := asynq.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ { // each worker runs a task of the queue: its sweep starts
		mu.Lock()
		both := ran[0] && ran[1]
		mu.Unlock()
		if both {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the two workers did not each run a task within 30s")
		}
		b, _ := json.Marshal(map[string]any{"sku": fmt.Sprintf("cold-%d", i)})
		if _, err := c.Enqueue(asynq.NewTask("report", b)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	waitState(t, insp, "parked", asynq.TaskStateCompleted)
	time.Sleep(time.Second) // a double move would run it again
	mu.Lock()
	got := runs["parked"]
	mu.Unlock()
	if got != 1 || runs["failed"] != 0 {
		t.Fatalf("runs %v: want the parked task once, the failed one never", runs)
	}
	if info, err := insp.GetTaskInfo("default", "failed"); err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("the failed task: %+v, %v; want it left archived", info, err)
	}
	if err := insp.RunTask("default", "parked"); err != nil { // the control
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for mu.Lock(); runs["parked"] != 2; mu.Lock() {
		mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("control: a second move of the completed task did not run it again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Unlock()
}

// archive leaves two tasks in the archive through a plain asynq server: one
// as a park on its last retry leaves it, one failed, both 17 minutes ago.
func archive(t *testing.T, opt asynq.RedisConnOpt) {
	t.Helper()
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("report", func(ctx context.Context, _ *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == "parked" {
			return errors.New("middleware: resource busy, task requeued (parked p1): report:A: redlock: resource locked")
		}
		return errors.New("disk full")
	})
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	c := asynq.NewClient(opt)
	defer c.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	b, _ := json.Marshal(map[string]any{"sku": "A"})
	for _, id := range []string{"parked", "failed"} {
		if _, err := c.Enqueue(asynq.NewTask("report", b), asynq.TaskID(id), asynq.MaxRetry(0), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"parked", "failed"} {
		waitState(t, insp, id, asynq.TaskStateArchived)
	}
	srv.Shutdown()
	raw := opt.MakeRedisClient().(redis.UniversalClient)
	defer raw.Close()
	for _, id := range []string{"parked", "failed"} {
		failedAgo(t, raw, "default", id, 17*time.Minute)
	}
}

// failedAgo sets the last failure of task id of queue to d ago: a park
// that old, past its parker's tries, which no test can wait for. It
// rewrites field 11 (last_failed_at, Unix seconds) of asynq v0.26's task
// message (internal/proto/asynq.proto) and keeps the others byte for byte.
func failedAgo(t *testing.T, raw redis.UniversalClient, queue, id string, d time.Duration) {
	t.Helper()
	key := "asynq:{" + queue + "}:t:" + id
	msg, err := raw.HGet(context.Background(), key, "msg").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for b := msg; len(b) > 0; {
		tag, n := binary.Uvarint(b)
		l := n
		switch tag & 7 { // the wire type
		case 0:
			_, m := binary.Uvarint(b[n:])
			l += m
		case 1:
			l += 8
		case 2:
			size, m := binary.Uvarint(b[n:])
			l += m + int(size)
		case 5:
			l += 4
		}
		if n <= 0 || l > len(b) || tag&7 > 5 {
			t.Fatalf("task %s: cannot read its message", id)
		}
		if tag>>3 != 11 {
			out = append(out, b[:l]...)
		}
		b = b[l:]
	}
	out = binary.AppendUvarint(binary.AppendUvarint(out, 11<<3), uint64(time.Now().Add(-d).Unix()))
	if err := raw.HSet(context.Background(), key, "msg", out).Err(); err != nil {
		t.Fatal(err)
	}
}

// waitState waits (bounded) until task id of the default queue is in state.
func waitState(t *testing.T, insp *asynq.Inspector, id string, state asynq.TaskState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := insp.GetTaskInfo("default", id)
		if err == nil && info.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: %+v, %v; want %v", id, info, err, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
