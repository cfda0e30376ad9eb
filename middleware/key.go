package middleware

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// KeyFunc derives the lock key of a task. An empty key means the task runs
// without a lock; an error means the task is malformed (it is archived with
// asynq.SkipRetry and the error's message).
type KeyFunc func(ctx context.Context, t *asynq.Task) (string, error)

// ErrBadKey marks a task whose lock key cannot be derived.
var ErrBadKey = errors.New("asynqlock: cannot derive the task's lock key")

// ByType locks on the task type: one task of each type at a time.
func ByType() KeyFunc {
	return func(_ context.Context, t *asynq.Task) (string, error) { return t.Type(), nil }
}

// ByField locks on a field of the task's JSON payload, e.g. "sku" or a dotted
// path such as "order.item.sku". Strings, numbers and booleans are keys; a
// missing field, null, an object or an array, or a payload that is not a
// JSON object is an error naming the field.
func ByField(path string) KeyFunc {
	parts := strings.Split(path, ".")
	return func(_ context.Context, t *asynq.Task) (string, error) {
		if path == "" {
			return "", fmt.Errorf("%w: empty field path", ErrBadKey)
		}
		dec := json.NewDecoder(bytes.NewReader(t.Payload()))
		dec.UseNumber()
		var doc any
		if err := dec.Decode(&doc); err != nil {
			return "", fmt.Errorf("%w: field %q: payload is not valid JSON: %v", ErrBadKey, path, err)
		}
		cur := doc
		for i, p := range parts {
			obj, ok := cur.(map[string]any)
			if !ok {
				return "", fmt.Errorf("%w: field %q: %q is not a JSON object", ErrBadKey, path, strings.Join(parts[:i], "."))
			}
			if cur, ok = obj[p]; !ok {
				return "", fmt.Errorf("%w: field %q is missing from the payload", ErrBadKey, path)
			}
		}
		switch v := cur.(type) {
		case string:
			if v == "" {
				return "", fmt.Errorf("%w: field %q is an empty string", ErrBadKey, path)
			}
			return v, nil
		case json.Number:
			return v.String(), nil
		case bool:
			return strconv.FormatBool(v), nil
		case nil:
			return "", fmt.Errorf("%w: field %q is null", ErrBadKey, path)
		}
		return "", fmt.Errorf("%w: field %q is a JSON %T, not a string, number or boolean", ErrBadKey, path, cur)
	}
}

// ByPayloadHash locks on a hash of the payload: identical tasks exclude each
// other, different ones run in parallel.
func ByPayloadHash() KeyFunc {
	return func(_ context.Context, t *asynq.Task) (string, error) {
		sum := sha256.Sum256(t.Payload())
		return hex.EncodeToString(sum[:16]), nil
	}
}
