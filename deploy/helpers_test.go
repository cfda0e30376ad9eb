package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// requireTool returns the path of the command name; missing, it skips the
// test loudly, or fails it when CI=true, naming the Debian package.
func requireTool(t *testing.T, pkg, purpose, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found: install it with `apt-get install %s` to %s", name, pkg, purpose)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (required when CI=true)")
	}
	t.Skip("*** TEST SKIPPED ***: " + msg)
	return ""
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(docs)+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// object returns the manifest of kind and name in deploy/kubernetes.
func object(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			if d["kind"] == kind && dig(d, "metadata", "name") == name {
				return d
			}
		}
	}
	t.Fatalf("no %s %q in deploy/kubernetes", kind, name)
	return nil
}

// objects returns the manifests of kind in deploy/kubernetes.
func objects(t *testing.T, kind string) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	var out []map[string]any
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			if d["kind"] == kind {
				out = append(out, d)
			}
		}
	}
	return out
}

// dig walks maps by keys (and lists by their single or first element
// when a key is an int); nil when a step is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// container returns the named container of a workload's pod template.
func container(t *testing.T, workload map[string]any, name string) map[string]any {
	t.Helper()
	cs, _ := dig(workload, "spec", "template", "spec", "containers").([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// readDoc returns a file's text.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
