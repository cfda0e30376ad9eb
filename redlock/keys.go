package redlock

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// keys are the Redis names of one resource, in one cluster slot (keyOf).
type keys struct {
	resource string
	key      string // the lock: token with a TTL (a slot's key under WithLimit)
	fenceKey string // the fencing counter
	channel  string // release announcements
}

func (c *Client) keysFor(resource string) keys {
	k := keyOf(c.cfg.prefix, resource)
	return keys{resource: resource, key: k, fenceKey: k + fenceSuffix, channel: k + channelSuffix}
}

// What follows a resource's lock key in the names of its fencing counter,
// release channel (lua/release_many.lua's too) and slots above 0.
const (
	fenceSuffix   = ":fence"
	channelSuffix = ":released"
	slotSuffix    = ":slot:"
)

func (k keys) lockKeys() []string { return []string{k.key} }
func (k keys) bothKeys() []string { return []string{k.key, k.fenceKey} }

// slotKeys are the keys of slot i of resource: its lock key, and the
// counter and channel the slots share.
func (c *Client) slotKeys(resource string, i int) keys {
	k := c.keysFor(resource)
	k.key = slotKey(k.key, i)
	return k
}

// tagLen is the length of the hash tag of a resource name containing '}'.
const tagLen = 16

// keyOf is the lock key of resource: prefix{resource} for every name
// without '}', else prefix{hash}resource, so that all of a resource's keys
// share one cluster slot (docs/design/REDLOCK.md, "Key names").
func keyOf(prefix, resource string) string {
	if !strings.Contains(resource, "}") {
		return prefix + "{" + resource + "}"
	}
	return prefix + "{" + nameTag(resource) + "}" + resource
}

// nameTag is 64 bits of the name's SHA-256.
func nameTag(resource string) string {
	sum := sha256.Sum256([]byte(resource))
	return hex.EncodeToString(sum[:tagLen/2])
}

// resourceOf inverts keyOf, false for other keys (counters, queues, other
// programs'): prefix{hash}a}:fence is the fence of "a}", not a lock.
func (c *Client) resourceOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, c.cfg.prefix+"{")
	if !ok {
		return "", false
	}
	end := strings.IndexByte(rest, '}')
	switch {
	case end < 0:
		return "", false
	case end == len(rest)-1:
		return rest[:end], end > 0
	}
	tag, name := rest[:end], rest[end+1:]
	if len(tag) != tagLen || !strings.Contains(name, "}") || nameTag(name) != tag {
		return "", false
	}
	return name, true
}

// resourceOfSlot is resourceOf for the key of a slot above 0 too.
func (c *Client) resourceOfSlot(key string) (string, bool) {
	if r, ok := c.resourceOf(key); ok {
		return r, true
	}
	i := strings.LastIndex(key, slotSuffix)
	if i < 0 {
		return "", false
	}
	n, err := strconv.Atoi(key[i+len(slotSuffix):])
	r, ok := c.resourceOf(key[:i])
	if err != nil || n < 1 || !ok || slotKey(keyOf(c.cfg.prefix, r), n) != key {
		return "", false
	}
	return r, true
}

// scanPatterns are the SCAN MATCH patterns of the lock and slot keys of
// names starting with resourcePrefix, one per key form.
func (c *Client) scanPatterns(resourcePrefix string) []string {
	p := globEscape(c.cfg.prefix) + "{"
	hashed := p + strings.Repeat("?", tagLen) + "}" + globEscape(resourcePrefix) + "*"
	if strings.Contains(resourcePrefix, "}") {
		return []string{hashed}
	}
	return []string{p + globEscape(resourcePrefix) + "*}", p + globEscape(resourcePrefix) + "*}" + slotSuffix + "*", hashed}
}

// slotKey is the key of slot i of the resource locked by lockKey (slot 0's).
func slotKey(lockKey string, i int) string {
	if i == 0 {
		return lockKey
	}
	return lockKey + slotSuffix + strconv.Itoa(i)
}
