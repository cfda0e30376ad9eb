package redlock

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// braceNames are resource names that put braces where a hash tag is read.
var braceNames = []string{"{", "}", "}x", "{}", "x{y}z", "a}:fence", "a}", "{a}", "}}", "a}:q", "sku-1", "a{b"}

// clusterTag is what Redis Cluster hashes of a key: the text between the
// first '{' and the first '}' after it when not empty, else the whole key.
func clusterTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// TestKeysShareOneSlot: every key of a resource has one hash tag, whatever
// braces its name holds.
func TestKeysShareOneSlot(t *testing.T) {
	c := &Client{cfg: config{prefix: "asynqlock:"}}
	for _, name := range braceNames {
		k := c.keysFor(name)
		all := append(k.queueKeys(), k.channel)
		for _, key := range all {
			if clusterTag(key) != clusterTag(k.key) {
				t.Fatalf("%q: key %q has tag %q, lock key %q has %q", name, key, clusterTag(key), k.key, clusterTag(k.key))
			}
		}
	}
}

// TestKeysOfNamesWithoutBraceUnchanged: deployments running the previous
// form keep their keys for every name without '}'.
func TestKeysOfNamesWithoutBraceUnchanged(t *testing.T) {
	c := &Client{cfg: config{prefix: "p:"}}
	for _, name := range []string{"sku-1", "{", "a{b", "x:y"} {
		if got, want := c.keysFor(name).key, "p:{"+name+"}"; got != want {
			t.Fatalf("key of %q = %q, want %q", name, got, want)
		}
	}
}

// TestResourceOfInvertsKeyOf: every lock key gives its name back, and no
// suffix key (fence, queue, channel) passes for a lock key.
func TestResourceOfInvertsKeyOf(t *testing.T) {
	c := &Client{cfg: config{prefix: "p:"}}
	for _, name := range braceNames {
		k := c.keysFor(name)
		if got, ok := c.resourceOf(k.key); !ok || got != name {
			t.Fatalf("resourceOf(%q) = %q, %v; want %q", k.key, got, ok, name)
		}
		if got, ok := c.resourceOfSlot(slotKey(k.key, 3)); !ok || got != name {
			t.Fatalf("resourceOfSlot(slot 3 of %q) = %q, %v", name, got, ok)
		}
		if got, ok := c.resourceOfSlot(k.key + slotSuffix + "0"); ok {
			t.Fatalf("resourceOfSlot(%q) = %q: slot 0 has no suffix", k.key+slotSuffix+"0", got)
		}
		for _, other := range append(k.queueKeys()[1:], k.channel) {
			if got, ok := c.resourceOf(other); ok {
				t.Fatalf("resourceOf(%q) = %q, a suffix key of %q taken for a lock", other, got, name)
			}
		}
	}
	for _, key := range []string{"p:{}", "p:{", "q:{a}", "p:{0123456789abcdef}a}"} {
		if got, ok := c.resourceOf(key); ok {
			t.Fatalf("resourceOf(%q) = %q, want no resource", key, got)
		}
	}
}

// TestBraceNamesLockReleaseList: on a redis-server node, names with braces are
// taken, listed, released and taken again, fenced or not.
func TestBraceNamesLockReleaseList(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	for _, name := range braceNames {
		l, err := c.TryAcquire(ctx, name, 10*time.Second, WithFencing())
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if _, err := c.TryAcquire(ctx, name, 10*time.Second); err == nil {
			t.Fatalf("%q: taken twice", name)
		}
		found, _, err := c.Admin().Scan(ctx, name)
		if err != nil || !slices.Contains(found, name) {
			t.Fatalf("%q: scan found %q, %v", name, found, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%q: release: %v", name, err)
		}
		l2, err := c.TryAcquire(ctx, name, 10*time.Second, WithFencing())
		if err != nil || l2.Fence() <= l.Fence() {
			t.Fatalf("%q: again: %v, fence %d after %d", name, err, l2.Fence(), l.Fence())
		}
		_ = l2.Release(ctx)
	}
}

// TestScanPrefixNotUTF8: a resource prefix that is not valid UTF-8 (and a
// glob character) is matched byte for byte, not as U+FFFD.
func TestScanPrefixNotUTF8(t *testing.T) {
	ctx := context.Background()
	c, _ := serverClient(t)
	name := "bad\xff*name"
	l, err := c.TryAcquire(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	found, _, err := c.Admin().Scan(ctx, "bad\xff*")
	if err != nil || !slices.Equal(found, []string{name}) {
		t.Fatalf("scan found %q, %v; want [%q]", found, err, name)
	}
}
