package middleware

import (
	"encoding/json"
	"unicode/utf8"
)

// A minimal scanner over JSON text that has already passed json.Valid. It
// finds the byte span of a field without decoding anything, so ByField costs
// one validation pass plus one walk over the bytes, and no allocation. Every
// function is defensive about bounds anyway and reports ok=false on
// anything unexpected: the caller then falls back to encoding/json.

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (or len(b)).
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString expects b[i] == '"' and returns the index just past the closing
// quote. plain reports that the bytes between the quotes are exactly the
// string's value as encoding/json decodes it: no escape sequence and valid
// UTF-8 (encoding/json replaces invalid UTF-8 with U+FFFD).
func scanString(b []byte, i int) (end int, plain, ok bool) {
	start := i + 1
	esc, nonASCII := false, false
	for i = start; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			plain = !esc && (!nonASCII || utf8.Valid(b[start:i]))
			return i + 1, plain, true
		case c == '\\':
			// The escaped byte is never a quote that ends the string; a
			// \uXXXX escape continues with hex digits, which are harmless.
			esc = true
			i++
		case c >= utf8.RuneSelf:
			nonASCII = true
		}
	}
	return 0, false, false
}

// skipValue returns the index just past the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		end, _, ok := scanString(b, i)
		return end, ok
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, _, ok := scanString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	// A number or a literal (true, false, null): up to the next delimiter.
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, i > start
		}
		i++
	}
	return i, i > start
}

// keyEquals reports whether the JSON string b[start:end] (quotes included)
// decodes to key. plain is scanString's verdict on it.
func keyEquals(b []byte, start, end int, plain bool, key string) (eq, ok bool) {
	if plain {
		return string(b[start+1:end-1]) == key, true
	}
	// An escaped key, or one with invalid UTF-8: rare, let encoding/json
	// unescape it exactly as it does when it decodes a map.
	var s string
	if err := json.Unmarshal(b[start:end], &s); err != nil {
		return false, false
	}
	return s == key, true
}

// objectField finds the field key in the JSON object that starts at b[i]
// (after whitespace) and returns the span b[vs:ve] of its value. Like
// encoding/json decoding into a map, the last of duplicate keys wins. ok is
// false if b[i] does not start an object or the text is malformed; found is
// false if the object has no such field.
func objectField(b []byte, i int, key string) (vs, ve int, found, ok bool) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return 0, 0, false, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false, false
		}
		kEnd, plain, sok := scanString(b, i)
		if !sok {
			return 0, 0, false, false
		}
		match, kok := keyEquals(b, i, kEnd, plain, key)
		if !kok {
			return 0, 0, false, false
		}
		i = skipSpace(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false, false
		}
		i = skipSpace(b, i+1)
		end, vok := skipValue(b, i)
		if !vok {
			return 0, 0, false, false
		}
		if match {
			vs, ve, found = i, end, true
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return 0, 0, false, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return vs, ve, found, true
		default:
			return 0, 0, false, false
		}
	}
}
