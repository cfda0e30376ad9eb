package middleware

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hibiken/asynq"
)

// KeyFunc derives the lock key of a task. An empty key means the task runs
// without a lock; an error means the task is malformed (it is archived with
// asynq.SkipRetry and the error's message). The helpers below never return
// an empty key: ByField treats an empty field as malformed; write a KeyFunc
// of your own that returns "" to run such tasks unlocked.
type KeyFunc func(ctx context.Context, t *asynq.Task) (string, error)

// errBadKey marks a task whose lock key cannot be derived.
var errBadKey = errors.New("middleware: cannot derive the task's lock key")

// ByType locks on the task type: one task of each type at a time, or with
// WithLimit(n) at most n, across every worker and process.
func ByType() KeyFunc {
	return func(_ context.Context, t *asynq.Task) (string, error) { return t.Type(), nil }
}

// ByField locks on a field of the task's JSON payload, e.g. "sku" or a dotted
// path such as "order.item.sku". Non-empty strings, numbers and booleans are
// keys; anything else (missing, "", null, an object or an array, a payload
// that is no JSON object) is an error naming the field: the task is archived,
// as running it unlocked could lose an update. ByField panics on a path with
// an empty segment ("", "order..sku"), like regexp.MustCompile.
func ByField(path string) KeyFunc {
	parts := strings.Split(path, ".")
	if slices.Contains(parts, "") {
		panic(fmt.Sprintf("middleware: ByField(%q): empty field name in the path; expected e.g. \"sku\" or \"order.item.sku\"", path))
	}
	return func(_ context.Context, t *asynq.Task) (string, error) {
		// Walk down the path decoding one object level at a time into raw
		// messages: only the fields on the path are ever decoded.
		raw := json.RawMessage(t.Payload())
		for i, p := range parts {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
				if i == 0 && !json.Valid(raw) {
					return "", fmt.Errorf("%w: field %q: payload is not valid JSON: %v", errBadKey, path, err)
				}
				where := strings.Join(parts[:i], ".")
				if i == 0 {
					where = "the payload"
				}
				return "", fmt.Errorf("%w: field %q: %q is not a JSON object", errBadKey, path, where)
			}
			v, ok := obj[p]
			if !ok {
				return "", fmt.Errorf("%w: field %q is missing from the payload", errBadKey, path)
			}
			raw = v
		}
		return scalarKey(path, raw)
	}
}

// scalarKey turns a JSON string, number or boolean into a key; raw is one
// valid value as encoding/json cut it out: never empty, no space around it.
func scalarKey(path string, raw json.RawMessage) (string, error) {
	switch {
	case raw[0] == '"':
		var s string
		_ = json.Unmarshal(raw, &s) // a valid string: it cannot fail
		if s == "" {
			return "", fmt.Errorf("%w: field %q is an empty string", errBadKey, path)
		}
		return s, nil
	case string(raw) == "null":
		return "", fmt.Errorf("%w: field %q is null", errBadKey, path)
	case raw[0] == '{':
		return "", fmt.Errorf("%w: field %q is a JSON object, not a string, number or boolean", errBadKey, path)
	case raw[0] == '[':
		return "", fmt.Errorf("%w: field %q is a JSON array, not a string, number or boolean", errBadKey, path)
	}
	return string(raw), nil // a number or a boolean, as written
}

// ByPayloadHash locks on a hash of the payload: identical tasks exclude each
// other, different ones run in parallel.
func ByPayloadHash() KeyFunc {
	return func(_ context.Context, t *asynq.Task) (string, error) {
		sum := sha256.Sum256(t.Payload())
		return hex.EncodeToString(sum[:16]), nil
	}
}
