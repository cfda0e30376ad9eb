package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// byFieldCases are payloads and paths on which ByField must agree with a
// full encoding/json decoding of the payload: the tricky corners of JSON
// syntax (escapes, invalid UTF-8, duplicate keys, whitespace, depth).
var byFieldCases = []struct{ path, payload string }{
	{"sku", `{"sku":"A-1"}`},
	{"sku", `{"id":123,"sku":"SKU-42","delta":-3,"meta":{"source":"api","tags":["a","b"]}}`},
	{"meta.source", `{"id":123,"sku":"SKU-42","delta":-3,"meta":{"source":"api","tags":["a","b"]}}`},
	{"meta.tags", `{"id":123,"sku":"SKU-42","delta":-3,"meta":{"source":"api","tags":["a","b"]}}`},
	{"meta.tags.0", `{"meta":{"tags":["a","b"]}}`},
	{"order.item.sku", `{"order":{"item":{"sku":"B-2"}}}`},
	{"order.item.sku", `{"order":{"item":{"qty":1}}}`},
	{"order.item.sku", `{"order":{"item":"x"}}`},
	{"order.item.sku", `{"order":null}`},
	{"order.item.sku", `{"order":[{"item":{"sku":"B-2"}}]}`},
	// Escaped keys and values.
	{"sku", `{"s\u006bu":"A-1"}`},
	{"sku", `{"s\u006bu":"A-1","sku":"B-2"}`},
	{"sku", `{"sku":"B-2","s\u006bu":"A-1"}`},
	{"s\"ku", `{"s\"ku":"q"}`},
	{`s\ku`, `{"s\\ku":"bs"}`},
	{"sku", `{"sku":"a\"b\\c\/d\u00e9\ud83d\ude00\n"}`},
	{"sku", `{"sku":"\ud800"}`},
	{"sku", `{"sku":"\u0000"}`},
	{"sku", `{"sku":"\"}"}`},
	{"sku", `{"sku":"é日本"}`},
	{"é", `{"é":"x"}`},
	{"\ufffd", "{\"\xff\":\"x\"}"},
	{"\xff", "{\"\xff\":\"x\"}"},
	{"sku", "{\"sku\":\"a\xffb\"}"},
	{"sku", "{\"sku\":\"\xed\xa0\x80\"}"},
	// Duplicate keys: the last one wins.
	{"sku", `{"sku":"first","sku":"last"}`},
	{"sku", `{"sku":"first","sku":null}`},
	{"sku", `{"sku":null,"sku":"last"}`},
	{"a.b", `{"a":{"b":1},"a":{"c":2}}`},
	{"a.b", `{"a":{"b":1,"b":2}}`},
	// Whitespace everywhere.
	{"sku", " \t\r\n{ \t\r\n\"sku\" \t\r\n: \t\r\n\"W\" \t\r\n} \t\r\n"},
	{"a.b", "\n{\n \"x\" : [ 1 , { } , [ ] ] ,\n \"a\" : { \"b\" : 7 } \n}\n"},
	{"sku", "{ }"},
	{"sku", "{\"sku\" : 1.5e+10 }"},
	// Siblings with braces and quotes inside strings, nested deeply.
	{"sku", `{"x":{"y":"}\"{[","z":[{"}":"]"},"\\"]},"sku":"S"}`},
	{"sku", `{"x":["{",{"a":["}"]},"\"],"],"sku":"S","y":{}}`},
	{"b", `{"a":{"b":"inner"},"c":[{"b":"in array"}],"b":"outer"}`},
	{"b", `{"a":{"b":"inner"}}`},
	// Numbers, literals.
	{"n", `{"n":0}`},
	{"n", `{"n":-0}`},
	{"n", `{"n":1.50}`},
	{"n", `{"n":-12.5e-3}`},
	{"n", `{"n":1E400}`},
	{"n", `{"n":12345678901234567890}`},
	{"n", `{"n":true}`},
	{"n", `{"n":false}`},
	{"n", `{"n":null}`},
	{"n", `{"n":""}`},
	{"n", `{"n":"\u0020"}`},
	{"n", `{"n":{}}`},
	{"n", `{"n":[]}`},
	// Paths with empty segments.
	{"", `{"":"e"}`},
	{".", `{"":{"":"ee"}}`},
	{"a.", `{"a":{"":"x"}}`},
	{".a", `{"":{"a":"y"}}`},
	// Not objects, missing, empty, invalid.
	{"sku", `{"other":1}`},
	{"sku", `[1,2]`},
	{"sku", `"sku"`},
	{"sku", `42`},
	{"sku", `null`},
	{"sku", `true`},
	{"sku", ``},
	{"sku", `   `},
	{"sku", `{"sku":`},
	{"sku", `{"sku":"A"`},
	{"sku", `{"sku":"A"}}`},
	{"sku", `{"sku":"A"} {"sku":"B"}`},
	{"sku", `{"sku":'A'}`},
	{"sku", `{sku:"A"}`},
	{"sku", `{"sku":"A",}`},
	{"sku", `{"sku":01}`},
	{"sku", `{"sku":"tab	here"}`},
	{"sku", `{"sku":"bad \x escape"}`},
	{"sku", `not json`},
	{"sku", "{\"sku\":\"A\"}\x00"},
	{"sku", strings.Repeat("[", 10001) + strings.Repeat("]", 10001)},
	{"sku", `{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `,"sku":"deep"}`},
	{"sku", `{"x":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `,"sku":"deep"}`},
}

// checkByField asserts that ByField answers exactly like decoding the whole
// payload with encoding/json and walking the path: the same key, or an
// errBadKey error where the reference finds no usable key.
func checkByField(t *testing.T, path, payload string) {
	t.Helper()
	parts := strings.Split(path, ".")
	if slices.Contains(parts, "") {
		return // ByField refuses such a path where it is written
	}
	want, wantOK := referenceKey(parts, []byte(payload))
	got, err := ByField(path)(context.Background(), task("t", payload))
	switch {
	case wantOK && (err != nil || got != want):
		t.Fatalf("ByField(%q) on %q = %q, %v; encoding/json says %q", path, payload, got, err, want)
	case !wantOK && (!errors.Is(err, errBadKey) || got != ""):
		t.Fatalf("ByField(%q) on %q = %q, %v; want an errBadKey error", path, payload, got, err)
	}
}

// referenceKey decodes the whole payload (numbers as json.Number) and walks
// the path through the objects; ok is false where there is no usable key.
func referenceKey(parts []string, payload []byte) (string, bool) {
	if !json.Valid(payload) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	for _, p := range parts {
		obj, isObj := v.(map[string]any)
		if !isObj {
			return "", false
		}
		if v, isObj = obj[p]; !isObj {
			return "", false
		}
	}
	switch k := v.(type) {
	case string:
		return k, k != ""
	case json.Number:
		return k.String(), true
	case bool:
		return strconv.FormatBool(k), true
	}
	return "", false
}

func TestByFieldMatchesFullDecoding(t *testing.T) {
	for _, c := range byFieldCases {
		checkByField(t, c.path, c.payload)
	}
}

func FuzzByField(f *testing.F) {
	for _, c := range byFieldCases {
		// The deeply nested payloads only slow the fuzzer's mutations
		// down; the table test covers them.
		if len(c.payload) <= 1024 {
			f.Add(c.path, []byte(c.payload))
		}
	}
	f.Fuzz(func(t *testing.T, path string, payload []byte) {
		checkByField(t, path, string(payload))
	})
}

// BenchmarkByField: the cost of deriving a key from a typical payload.
func BenchmarkByField(b *testing.B) {
	ctx := context.Background()
	tk := task("stock:adjust", `{"id":123,"sku":"SKU-42","delta":-3,"meta":{"source":"api","tags":["a","b"]}}`)
	for _, path := range []string{"sku", "meta.source"} {
		fn := ByField(path)
		b.Run(path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fn(ctx, tk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
