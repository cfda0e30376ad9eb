package middleware

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

func TestByField(t *testing.T) {
	ctx := context.Background()
	good := []struct {
		path, payload, want string
	}{
		{"sku", `{"sku":"A-1"}`, "A-1"},
		{"sku", `{"sku":42}`, "42"},
		{"sku", `{"sku":12345678901234567890}`, "12345678901234567890"},
		{"order.item.sku", `{"order":{"item":{"sku":"B-2"}}}`, "B-2"},
		{"flag", `{"flag":true}`, "true"},
	}
	for _, g := range good {
		got, err := ByField(g.path)(ctx, task("t", g.payload))
		if err != nil || got != g.want {
			t.Errorf("ByField(%q) on %s = %q, %v; want %q", g.path, g.payload, got, err, g.want)
		}
	}
	bad := []struct {
		path, payload, want string
	}{
		{"sku", `{"sku":`, "not valid JSON"},
		{"sku", `not json`, "not valid JSON"},
		{"sku", `{"other":1}`, `field "sku" is missing`},
		{"sku", `{"sku":null}`, `field "sku" is null`},
		{"sku", `{"sku":""}`, "empty string"},
		{"sku", `{"sku":{"a":1}}`, "not a string, number or boolean"},
		{"order.sku", `{"order":"x"}`, `"order" is not a JSON object`},
		{"sku", `[1,2]`, "is not a JSON object"},
	}
	for _, b := range bad {
		_, err := ByField(b.path)(ctx, task("t", b.payload))
		if !errors.Is(err, errBadKey) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ByField(%q) on %s: %v, want errBadKey mentioning %q", b.path, b.payload, err, b.want)
		}
	}
}

func TestByTypeAndPayloadHash(t *testing.T) {
	ctx := context.Background()
	if k, _ := ByType()(ctx, task("email:send", `{}`)); k != "email:send" {
		t.Fatalf("ByType = %q", k)
	}
	a, _ := ByPayloadHash()(ctx, task("t", `{"a":1}`))
	b, _ := ByPayloadHash()(ctx, task("t", `{"a":1}`))
	c, _ := ByPayloadHash()(ctx, task("t", `{"a":2}`))
	if a == "" || a != b || a == c {
		t.Fatalf("hashes %q %q %q", a, b, c)
	}
}

// TestBadKeyArchivesWithReason: a task whose key cannot be derived is
// archived (SkipRetry) with a message naming its type, ID and the field.
func TestBadKeyArchivesWithReason(t *testing.T) {
	e := newEnv(t)
	withMeta(t, taskMeta{id: "task-77", maxRetry: 25, known: true})
	ev := &events{}
	rec := &recorder{}
	h := Lock(e.locks, ByField("sku"), WithObserver(ev.add))(rec)
	err := h.ProcessTask(context.Background(), task("stock:adjust", `{"qty":1}`))
	if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, errBadKey) {
		t.Fatalf("err %v, want SkipRetry and errBadKey", err)
	}
	for _, want := range []string{"stock:adjust", "task-77", `"sku"`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
	if rec.count() != 0 {
		t.Fatal("handler ran without a key")
	}
	if _, ok := ev.find(kindBadKey, ""); !ok {
		t.Fatal("no bad-key event")
	}
}

// TestEmptyKeyRunsWithoutLock and resource naming per task type.
func TestEmptyKeyAndResourceNames(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	withMeta(t, taskMeta{id: "t", maxRetry: 3, known: true})
	rec := &recorder{}
	none := func(context.Context, *asynq.Task) (string, error) { return "", nil }
	if err := Lock(e.locks, none)(rec).ProcessTask(ctx, adjust()); err != nil || rec.count() != 1 || len(rec.infos) != 0 {
		t.Fatalf("empty key: err %v, runs %d, infos %v", err, rec.count(), rec.infos)
	}

	// Same key, different task types: separate resources unless shared.
	seen := map[string]bool{}
	rec2 := &recorder{fn: func(ctx context.Context) error {
		li, _ := LockFromContext(ctx)
		seen[li.Resource] = true
		return nil
	}}
	for _, typ := range []string{"stock:adjust", "stock:audit"} {
		if err := Lock(e.locks, ByField("sku"))(rec2).ProcessTask(ctx, task(typ, `{"sku":"X"}`)); err != nil {
			t.Fatal(err)
		}
		if err := Lock(e.locks, ByField("sku"), WithSharedKeys())(rec2).ProcessTask(ctx, task(typ, `{"sku":"X"}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"task:stock:adjust:X", "task:stock:audit:X", "task:X"} {
		if !seen[want] {
			t.Fatalf("resources %v lack %s", seen, want)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("resources %v", seen)
	}
}

// TestByFieldRefusesAnEmptyPath: a path that names no field is refused where
// it is written (it could never derive a key), saying why.
func TestByFieldRefusesAnEmptyPath(t *testing.T) {
	for _, path := range []string{"", "order..sku", "sku.", ".sku"} {
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, "empty field name") || !strings.Contains(msg, "ByField") {
					t.Errorf("ByField(%q) did not panic with a message naming the problem: %v", path, r)
				}
			}()
			ByField(path)
		}()
	}
}
