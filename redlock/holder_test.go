package redlock

import (
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestHolderTravelsInTheLockValue: the value stored on the node names the
// holder's host, pid and name, Inspect reads it back, and the compare-token
// scripts still release the lock.
func TestHolderTravelsInTheLockValue(t *testing.T) {
	ctx := within(t, 10*time.Second)
	c, raw := serverClient(t)
	host, _ := os.Hostname()
	name := "inventory:update a|b&c=d é" // separators and non-ASCII survive
	l, err := c.TryAcquire(ContextWithHolder(ctx, name), "sku-1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := Holder{Host: host, PID: os.Getpid(), Name: name}
	stored := raw.Get(ctx, c.keysFor("sku-1").key).Val()
	if stored != l.Token() {
		t.Fatalf("node holds %q, lock token %q", stored, l.Token())
	}
	if got, ok := parseHolder(stored); !ok || got != want {
		t.Fatalf("parseHolder(stored) = %+v, %v; want %+v", got, ok, want)
	}
	if holderOf(l.Token()) != want {
		t.Fatalf("parseHolder(Token()) = %+v, want %+v", holderOf(l.Token()), want)
	}
	st, err := c.Inspect(ctx, "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := st[0].Holder; got != want {
		t.Fatalf("Inspect holder = %+v; want %+v", got, want)
	}
	if random, _, _ := strings.Cut(l.Token(), holderSep); len(random) < 26 {
		t.Fatalf("random part %q is shorter than 128 bits of base32", random)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release with a holder in the token: %v", err)
	}
	if n := raw.Exists(ctx, c.keysFor("sku-1").key).Val(); n != 0 {
		t.Fatal("release left the key")
	}
}

// TestHolderFromContextAndOff: ContextWithHolder names the holder (the
// innermost name wins); withHolderInfo(false) stores the random token alone.
func TestHolderFromContextAndOff(t *testing.T) {
	ctx := within(t, 10*time.Second)
	c, _ := serverClient(t)
	l, err := c.TryAcquire(ContextWithHolder(ctx, "job nightly"), "a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := holderOf(l.Token()).Name; got != "job nightly" {
		t.Fatalf("holder name %q from the context, want %q", got, "job nightly")
	}
	l2, err := c.TryAcquire(ContextWithHolder(ContextWithHolder(ctx, "job nightly"), "inner"), "b", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := holderOf(l2.Token()).Name; got != "inner" {
		t.Fatalf("holder name %q, want the innermost context's %q", got, "inner")
	}

	off, _ := serverClient(t, withHolderInfo(false))
	l3, err := off.TryAcquire(ContextWithHolder(ctx, "job nightly"), "c", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(l3.Token(), holderSep) {
		t.Fatalf("token %q carries a holder with withHolderInfo(false)", l3.Token())
	}
	if h, ok := parseHolder(l3.Token()); ok {
		t.Fatalf("ParseHolder found %+v in a bare token", h)
	}
}

// TestHolderNameIsCut: a long name is cut to maxHolderName bytes on a rune
// boundary, so the value sent with every call stays small.
func TestHolderNameIsCut(t *testing.T) {
	ctx := within(t, 10*time.Second)
	c, _ := serverClient(t)
	long := strings.Repeat("é", 200) // 400 bytes
	l, err := c.TryAcquire(ContextWithHolder(ctx, long), "r", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	name := holderOf(l.Token()).Name
	if len(name) > maxHolderName || len(name) < maxHolderName-1 || !utf8.ValidString(name) {
		t.Fatalf("cut name has %d bytes (valid UTF-8: %v), want %d or %d", len(name), utf8.ValidString(name), maxHolderName-1, maxHolderName)
	}
}

func TestHolderString(t *testing.T) {
	for _, tc := range []struct {
		h    Holder
		want string
	}{
		{Holder{}, ""},
		{Holder{Host: "w1", PID: 7}, "w1 pid 7"},
		{Holder{Host: "w1", PID: 7, Name: "job x"}, "job x (w1 pid 7)"},
		{Holder{Name: "job x"}, "job x"},
	} {
		if got := tc.h.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.h, got, tc.want)
		}
	}
}

// TestHolderParseRejectsForeignTokens: values written by other clients are
// not mistaken for a holder.
func TestHolderParseRejectsForeignTokens(t *testing.T) {
	for _, tok := range []string{"", "ABCDEF", "ABC|", "ABC|%zz", "ABC|x=1"} {
		if h, ok := parseHolder(tok); ok {
			t.Errorf("parseHolder(%q) = %+v, true", tok, h)
		}
	}
}

// holderOf is the holder a token carries, zero when none.
func holderOf(token string) Holder {
	h, _ := parseHolder(token)
	return h
}

// withHolderInfo turns the holder description in lock values on or off
// (benchmarks of what it costs). Default: on.
func withHolderInfo(on bool) Option { return func(c *config) { c.holderInfo = on } }
