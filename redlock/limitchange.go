package redlock

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Callers that use one resource with different limits share it under one
// rule (docs/design/REDLOCK.md, "Changing n"): callers of limits n > 1 share the
// slots, slot i being one key whatever n, so at most the largest n in use
// hold it at once; a plain lock and slots exclude each other. Neither is
// refused: they wait as for any holder. The nodes' marks name the limits in
// use (slot_mark.lua); this file turns what a round saw of them into one
// log line and one EventLimitChange per change, per Client.

// fenceClasses is the modulus of a slot's fence class: slot s takes fences
// equal to s modulo fenceClasses, whatever n, so that holders of different
// slots never share a fence, also while callers of two limits share the
// slots (docs/design/REDLOCK.md, "Limits").
const fenceClasses = MaxLimit

// maxLimitNotes bounds the resources whose last reported limits a Client
// remembers; past it they are forgotten at once (a change may then be
// reported twice, never missed).
const maxLimitNotes = 1024

// limitNotes is the last set of limits reported per resource.
type limitNotes struct {
	mu   sync.Mutex
	last map[string]string
}

// takeSlotChanges takes the changes of the limits in use that the nodes of
// slot round r reported ({fence, mark} replies, slot_mark.lua) out of its
// replies, so that the fence readers see what they expect, and reports the
// limits now in use.
func (c *Client) takeSlotChanges(r *round, k keys, limit int32) {
	if limit <= 1 {
		return
	}
	mark := ""
	for i := range r.slots {
		if v, ok := r.slots[i].val.([]any); ok && len(v) == 2 {
			r.slots[i].val = v[0]
			if m, ok := v[1].(string); ok {
				mark = m
			}
		}
	}
	if mark != "" {
		c.limitsInUse(k.resource, int(limit), limitsOfMark(mark))
	}
}

// limitsOfMark is the limits a node's mark names, in increasing order:
// 'limit:<n>' or 'limit:<n>@<until>,<m>@<until>' (slot_mark.lua).
func limitsOfMark(mark string) []int {
	body, ok := strings.CutPrefix(mark, markPrefix)
	if !ok {
		return nil
	}
	var out []int
	for part := range strings.SplitSeq(body, ",") {
		n, _, _ := strings.Cut(part, "@")
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// limitsInUse reports, once per change for resource, that callers of
// limits are using it (here is this caller's): a Warn line and an
// EventLimitChange while several are, an Info line and the event once one
// is left.
func (c *Client) limitsInUse(resource string, here int, limits []int) {
	if len(limits) == 0 {
		return
	}
	text := limitsText(limits)
	c.limitNotes.mu.Lock()
	if c.limitNotes.last == nil || len(c.limitNotes.last) >= maxLimitNotes {
		c.limitNotes.last = map[string]string{}
	}
	prev, seen := c.limitNotes.last[resource]
	c.limitNotes.last[resource] = text
	c.limitNotes.mu.Unlock()
	if prev == text || (!seen && len(limits) == 1) {
		return // no change, or one limit from the first sight on
	}
	var e *opError
	if len(limits) > 1 {
		e = &opError{kinds: []error{errLimitMismatch}, summary: "resource " + strconv.Quote(resource) + " is used with " + text +
			" at once (a change of limit under way): at most " + strconv.Itoa(limits[len(limits)-1]) + " hold it, the plain lock and slots in turns"}
		c.cfg.logger.Warn("redlock: limit of resource changing", "resource", resource, "limits", text, "here", here,
			"rule", "at most the largest limit hold it until the callers of the others are gone")
	} else {
		e = &opError{kinds: []error{errLimitMismatch}, summary: "resource " + strconv.Quote(resource) + " is now used with " + text + " alone"}
		c.cfg.logger.Info("redlock: limit of resource changed", "resource", resource, "limit", text, "was", prev)
	}
	c.observe(Event{Kind: EventLimitChange, Resource: resource, Limits: limits, Err: e})
}

// limitsText names limits for people: "limit 3", "limits 3 and 5", "no
// limit and limit 3" (1 is the plain lock).
func limitsText(limits []int) string {
	var parts []string
	rest := limits
	if len(rest) > 0 && rest[0] == 1 {
		parts, rest = append(parts, "no limit"), rest[1:]
	}
	switch nums := make([]string, len(rest)); len(rest) {
	case 0:
	case 1:
		parts = append(parts, "limit "+strconv.Itoa(rest[0]))
	default:
		for i, n := range rest {
			nums[i] = strconv.Itoa(n)
		}
		parts = append(parts, "limits "+strings.Join(nums[:len(nums)-1], ", ")+" and "+nums[len(nums)-1])
	}
	return strings.Join(parts, " and ")
}
