// Command modtool checks the repository's modules as their tags would
// publish them (see docs/design/RELEASING.md):
//
//	modtool gomod                 every go.mod: no replace, the repository's modules required at the CHANGELOG's version
//	modtool imports               no package imports another module's internal package
//	modtool proxy DIR             lays out a file-based module proxy (GOPROXY=file://DIR) of every module at HEAD
//	                              (MODTOOL_WORKTREE=1: of the working tree, for scripts/tidy)
//	modtool version               prints the version the next tags carry (the CHANGELOG's first section)
//	modtool list                  prints the modules' directories
//
// Run it from the repository root. The modules are those that go.work uses.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// repoPath is the root module's path; every module of the repository is it or under it.
const repoPath = "github.com/asynqlock/asynqlock"

func main() {
	if len(os.Args) < 2 {
		fail("usage: modtool gomod | imports | proxy DIR | version | list")
	}
	mods, err := modules()
	if err != nil {
		fail(err.Error())
	}
	switch os.Args[1] {
	case "list":
		for _, m := range mods {
			fmt.Println(m.dir)
		}
	case "version":
		v, err := changelogVersion()
		check(err)
		fmt.Println(v)
	case "gomod":
		v, err := changelogVersion()
		check(err)
		check(checkGoMods(mods, v))
	case "imports":
		check(checkImports(mods))
	case "proxy":
		if len(os.Args) != 3 {
			fail("usage: modtool proxy DIR")
		}
		v, err := changelogVersion()
		check(err)
		check(layOut(mods, v, os.Args[2], os.Getenv("MODTOOL_WORKTREE") == "1"))
	default:
		fail("unknown command " + os.Args[1])
	}
}

// mod is one module of the repository.
type mod struct {
	dir  string // relative to the repository root, "." for the root
	path string
	file *modfile.File
}

// modules reads go.work's use directives and each module's go.mod.
func modules() ([]mod, error) {
	data, err := os.ReadFile("go.work")
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	var out []mod
	for _, u := range wf.Use {
		dir := filepath.Clean(u.Path)
		gm := filepath.Join(dir, "go.mod")
		data, err := os.ReadFile(gm)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(gm, data, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, mod{dir: dir, path: f.Module.Mod.Path, file: f})
	}
	return out, nil
}

var heading = regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+)\b`)

// changelogVersion is the version of the CHANGELOG's first section: the one
// the next tags carry and the go.mod files require.
func changelogVersion() (string, error) {
	data, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		return "", err
	}
	m := heading.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("CHANGELOG.md: no section headed \"## X.Y.Z\"")
	}
	return "v" + string(m[1]), nil
}

// checkGoMods: a go.mod is published as it is, so it must build for a user:
// a replace is ignored in a dependency, and another module of the repository
// is required at the version its tag will carry.
func checkGoMods(mods []mod, version string) error {
	var problems []string
	for _, m := range mods {
		want := repoPath
		if m.dir != "." {
			want = repoPath + "/" + filepath.ToSlash(m.dir)
		}
		if m.path != want {
			problems = append(problems, fmt.Sprintf("%s/go.mod: module %s, want %s (its directory)", m.dir, m.path, want))
		}
		for _, r := range m.file.Replace {
			problems = append(problems, fmt.Sprintf("%s/go.mod: replace %s (ignored where the module is a dependency: develop across modules with go.work)", m.dir, r.Old.Path))
		}
		for _, r := range m.file.Require {
			if inRepo(r.Mod.Path) && r.Mod.Version != version {
				problems = append(problems, fmt.Sprintf("%s/go.mod: requires %s %s, want %s (the CHANGELOG's version)", m.dir, r.Mod.Path, r.Mod.Version, version))
			}
		}
	}
	return joined(problems)
}

func inRepo(p string) bool { return p == repoPath || strings.HasPrefix(p, repoPath+"/") }

// pkg is what go list tells of one package.
type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	Module                             *struct{ Path string }
}

// testHarness are the root module's test harnesses, which the tests of
// every module use. Tests build only in the workspace, every module at the
// same commit (a published go.mod does not even list what its tests need),
// so no version of one can meet another version of these.
var testHarness = []string{
	repoPath + "/internal/checker",
	repoPath + "/internal/cronsim",
	repoPath + "/internal/locktest",
	repoPath + "/internal/redistest",
	repoPath + "/internal/workertest",
}

// pending are the imports of another module's internals still to be
// replaced by public API, each with where that happens; the check fails on
// any other, and on one of these once it is gone (so the list shrinks).
var pending = map[string]string{}

// checkImports: a package of one module imports only public packages of
// the others (its tests: also testHarness). Go's internal rule is by path,
// and every module here is under the root's path, so the compiler does not
// catch this; a module built against another's internals breaks when
// minimal version selection pairs it with a version whose internals changed.
func checkImports(mods []mod) error {
	var paths []string
	for _, m := range mods {
		paths = append(paths, m.path)
	}
	found := map[string]bool{}
	var problems []string
	for _, m := range mods {
		pkgs, err := listPackages(m.dir)
		if err != nil {
			return err
		}
		for _, p := range pkgs {
			for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
				owner := owningModule(paths, imp)
				if owner == "" || owner == m.path || !internalIn(owner, imp) {
					continue
				}
				test := !slices.Contains(p.Imports, imp)
				if test && slices.Contains(testHarness, imp) {
					continue
				}
				key := short(p.ImportPath) + " -> " + short(imp)
				if test {
					key = short(p.ImportPath) + " (test) -> " + short(imp)
				}
				if _, ok := pending[key]; ok {
					found[key] = true
					continue
				}
				problems = append(problems, fmt.Sprintf("%s imports %s, an internal package of module %s", p.ImportPath, imp, owner))
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(pending)) {
		why := pending[key]
		if found[key] {
			fmt.Fprintf(os.Stderr, "modtool: pending: %s (to go with %s)\n", key, why)
		} else {
			problems = append(problems, fmt.Sprintf("pending import %q is gone: drop it from modtool's list", key))
		}
	}
	slices.Sort(problems)
	return joined(slices.Compact(problems))
}

// listPackages lists the packages of the module in dir, tests' imports included.
func listPackages(dir string) ([]pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w", dir, err)
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// short is p relative to the root module's path.
func short(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, repoPath), "/") }

// owningModule is the longest module path of the repository that holds imp.
func owningModule(paths []string, imp string) string {
	best := ""
	for _, p := range paths {
		if (imp == p || strings.HasPrefix(imp, p+"/")) && len(p) > len(best) {
			best = p
		}
	}
	return best
}

// internalIn reports whether imp, a package of module owner, is internal to it.
func internalIn(owner, imp string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(imp, owner), "/")
	return slices.Contains(strings.Split(rel, "/"), "internal")
}

// layOut writes, for every module, what a module proxy serves for its tag
// at version: the zip of the module's files at HEAD (as git archive gives
// them, nested modules left out), its go.mod, an .info and the version list.
// With worktree, the files are the working tree's (for scripts/tidy).
func layOut(mods []mod, version, dir string, worktree bool) error {
	src := "."
	if !worktree { // HEAD's files, as git archive gives them to a tag's zip
		tmp, err := os.MkdirTemp("", "modtool")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		archive := exec.Command("sh", "-c", "git archive --format=tar HEAD | tar -x -C "+tmp)
		archive.Stderr = os.Stderr
		if err := archive.Run(); err != nil {
			return fmt.Errorf("git archive HEAD: %w", err)
		}
		src = tmp
	}
	when, err := gitOutput("log", "-1", "--format=%cI", "HEAD")
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return err
	}
	for _, m := range mods {
		mv := module.Version{Path: m.path, Version: version}
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := zip.CreateFromDir(&buf, mv, filepath.Join(src, m.dir)); err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
		gomod, err := os.ReadFile(filepath.Join(src, m.dir, "go.mod"))
		if err != nil {
			return err
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, t.UTC()})
		files := map[string][]byte{
			version + ".zip":  buf.Bytes(),
			version + ".mod":  gomod,
			version + ".info": info,
			"list":            []byte(version + "\n"),
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func gitOutput(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

func joined(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	var b strings.Builder
	w := bufio.NewWriter(&b)
	for _, p := range problems {
		fmt.Fprintln(w, p)
	}
	w.Flush()
	return fmt.Errorf("%d problem(s):\n%s", len(problems), b.String())
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "modtool:", msg)
	os.Exit(1)
}
