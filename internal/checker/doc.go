// Package checker verifies histories of critical sections recorded by
// processes that contend on a lock, after the fact.
//
// Each holder records one [Section] per critical section: when it began
// (after its acquire returned) and ended (before its release was called), on
// one clock shared by every holder, and what it did to a per-resource
// register kept outside the lock: the value it read at the start and the
// unique value it wrote at the end, in two steps (a non-atomic
// read-modify-write that only the lock protects). [Check] then proves, per
// resource:
//
//   - mutual exclusion: no section began before an earlier one had ended
//     ([Overlap]);
//   - no lost update: ordered by start, each section read exactly the value
//     the previous writing section wrote, or the initial value for the first
//     ([StaleRead]); every written value was read by a later writer or is the
//     register's final value ([LostUpdate]); no two writers started from the
//     same value ([Duplicate]);
//   - fencing: sections that carry a fencing token have strictly increasing
//     tokens in start order ([FenceInversion]).
//
// The interval check needs a single clock: sections recorded by different
// processes are comparable only if their timestamps come from the same clock
// (processes on one machine reading CLOCK_MONOTONIC, or CLOCK_REALTIME
// without a step during the run). The LostUpdate and Duplicate checks need no
// clock at all: they catch a lost update even when clocks lie.
//
// Why not a linearizability checker such as porcupine with a register model:
// the property a lock promises is stronger and simpler than a linearizable
// register. Sections must not overlap at all, and because every write is
// unique they must form a single chain of reads and writes; both are checked
// by sorting, in O(n log n), with a deterministic verdict that names the two
// sections involved. A register model would accept an overlap that happened
// not to lose an update (two sections that interleave harmlessly are still
// linearizable), its search is exponential in the worst case, and it would
// add a dependency.
//
// A failed check keeps its evidence: [WriteEvidence] stores the history and
// the findings as JSON, a plain-text account of each violation and an SVG
// timeline.
package checker
