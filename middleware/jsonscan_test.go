package middleware

import (
	"context"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

// byFieldCases are payloads and paths on which the byte scanner of ByField
// must agree with encoding/json: the tricky corners of JSON syntax.
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

// checkFastMatchesSlow asserts that ByField answers exactly like the
// encoding/json implementation, and that the byte scanner serves every
// payload that has a key (it never gives up on a case it should handle).
func checkFastMatchesSlow(t *testing.T, path, payload string) {
	t.Helper()
	parts := strings.Split(path, ".")
	if slices.Contains(parts, "") {
		return // ByField refuses such a path where it is written
	}
	want, wantErr := byFieldSlow(path, parts, []byte(payload))
	got, gotErr := ByField(path)(context.Background(), task("t", payload))
	if got != want || errText(gotErr) != errText(wantErr) {
		t.Fatalf("ByField(%q) on %q = %q, %v; encoding/json says %q, %v", path, payload, got, gotErr, want, wantErr)
	}
	fast, ok := byFieldFast(parts, []byte(payload))
	switch {
	case ok && (wantErr != nil || fast != want):
		t.Fatalf("byFieldFast(%q) on %q = %q; encoding/json says %q, %v", path, payload, fast, want, wantErr)
	case !ok && wantErr == nil:
		t.Fatalf("byFieldFast(%q) on %q gave up; encoding/json says %q", path, payload, want)
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestByFieldFastMatchesSlow(t *testing.T) {
	for _, c := range byFieldCases {
		checkFastMatchesSlow(t, c.path, c.payload)
	}
}

// TestByFieldFastAllocations: a plain string or a number costs the key's
// string and nothing else; a boolean costs nothing.
func TestByFieldFastAllocations(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector makes sync.Pool, which json.Valid uses, drop items")
	}
	payload := []byte(`{"id":123,"sku":"SKU-42","delta":-3,"ok":true,"meta":{"source":"api","tags":["a","b"]}}`)
	for _, c := range []struct {
		path   string
		allocs float64
	}{{"sku", 1}, {"meta.source", 1}, {"delta", 1}, {"ok", 0}} {
		parts := strings.Split(c.path, ".")
		n := testing.AllocsPerRun(100, func() {
			if _, ok := byFieldFast(parts, payload); !ok {
				t.Fatalf("%s: fast path gave up", c.path)
			}
		})
		if n > c.allocs {
			t.Errorf("%s: %v allocations, want at most %v", c.path, n, c.allocs)
		}
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
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
		checkFastMatchesSlow(t, path, string(payload))
	})
}

func BenchmarkByField(b *testing.B) {
	ctx := context.Background()
	tk := task("stock:adjust", `{"id":123,"sku":"SKU-42","delta":-3,"meta":{"source":"api","tags":["a","b"]}}`)
	for _, path := range []string{"sku", "meta.source"} {
		parts := strings.Split(path, ".")
		slow := func(_ context.Context, t *asynq.Task) (string, error) {
			return byFieldSlow(path, parts, t.Payload())
		}
		for _, impl := range []struct {
			name string
			fn   KeyFunc
		}{{"fast", ByField(path)}, {"slow", slow}} {
			b.Run(impl.name+"/"+path, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.fn(ctx, tk); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
