package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link of the README, the CHANGELOG,
// bench/README.md and docs/ names a file of the repository, and every
// #anchor a heading of that file, as GitHub renders them.
func TestDocLinksResolve(t *testing.T) {
	root := "../.."
	files := []string{"README.md", "CHANGELOG.md", "bench/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	top, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, d := range append(docs, top...) {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	checked := 0
	for _, f := range files {
		for _, bad := range brokenLinks(t, root, f) {
			t.Errorf("%s: %s", f, bad)
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d files checked: the docs moved?", checked)
	}
}

func TestBrokenLinksFindsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.md", "# Top\n## Once: what `it` covers\n[ok](b.md#the-end) [ok](#once-what-it-covers) "+
		"[web](https://example.com/x.md) [gone](c.md) [bad](b.md#nowhere) [self](#nope)\n")
	write("b.md", "## The end\n")
	got := brokenLinks(t, dir, "a.md")
	want := []string{"c.md: no such file", "b.md#nowhere: no such heading", "#nope: no such heading"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("broken links %q, want %q", got, want)
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks returns the relative links of file (a path under root) that
// name no file or no heading.
func brokenLinks(t *testing.T, root, file string) []string {
	t.Helper()
	text := readFile(t, filepath.Join(root, file))
	var bad []string
	for _, m := range linkRE.FindAllStringSubmatch(stripCode(text), -1) {
		link := m[1]
		if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
			continue
		}
		path, anchor, _ := strings.Cut(link, "#")
		target := filepath.Join(root, filepath.Dir(file), path)
		if path == "" {
			target = filepath.Join(root, file)
		}
		st, err := os.Stat(target)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: no such file", link))
			continue
		}
		if anchor == "" || st.IsDir() {
			continue
		}
		if !anchors(readFile(t, target))[anchor] {
			bad = append(bad, fmt.Sprintf("%s: no such heading", link))
		}
	}
	return bad
}

// stripCode drops fenced code blocks, whose brackets are no links.
func stripCode(text string) string {
	return regexp.MustCompile("(?s)```.*?```").ReplaceAllString(text, "")
}

// anchors returns the anchors GitHub gives the headings of a Markdown text.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
