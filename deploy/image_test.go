package deploy

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// dockerfile is deploy/Dockerfile's instructions, continuation lines
// joined and comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(strings.ReplaceAll(string(b), "\\\n", " ")) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// TestDockerfileRunsTheWorkerAsNonRootFromScratch: the final stage is an
// empty image with a static binary, a non-root user and the endpoint on
// every interface at the port the probes use.
func TestDockerfileRunsTheWorkerAsNonRootFromScratch(t *testing.T) {
	var final []string // the last stage's instructions
	stages := 0
	for _, in := range dockerfile(t) {
		if strings.HasPrefix(in, "FROM ") {
			final, stages = nil, stages+1
		}
		final = append(final, in)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^FROM scratch$`),
		regexp.MustCompile(`^USER [1-9][0-9]*:[1-9][0-9]*$`),
		regexp.MustCompile(`^ENV METRICS_ADDR=:10090$`),
		regexp.MustCompile(`^ENTRYPOINT \["/worker"\]$`),
	}
	for _, re := range want {
		if !slicesMatch(final, re) {
			t.Errorf("the final stage lacks %s:\n%s", re, strings.Join(final, "\n"))
		}
	}
	if stages < 2 {
		t.Errorf("%d stage(s): want a build stage and the final one", stages)
	}
	vars, _ := workerEnv(t)
	if vars["METRICS_ADDR"] != ":10090" {
		t.Errorf("the image listens on :10090, the Deployment sets METRICS_ADDR=%q", vars["METRICS_ADDR"])
	}
}

func slicesMatch(lines []string, re *regexp.Regexp) bool {
	for _, l := range lines {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

// buildStep returns the Dockerfile's go build step as the shell command
// RUN gives /bin/sh, its output moved from /out to dir, and the default of
// its PROGRAM argument.
func buildStep(t *testing.T, dir string) (script, program string) {
	t.Helper()
	for _, in := range dockerfile(t) {
		if p, ok := strings.CutPrefix(in, "ARG PROGRAM="); ok {
			program = p
		}
		if run, ok := strings.CutPrefix(in, "RUN "); ok && strings.Contains(run, "go build") {
			script = strings.ReplaceAll(run, "/out/", dir+"/")
		}
	}
	if script == "" || program == "" || !strings.Contains(script, "$PROGRAM") {
		t.Fatalf("no `RUN ... go build ... $PROGRAM` step with an ARG PROGRAM default in the Dockerfile")
	}
	return script, program
}

// TestDockerfileBuildsAStaticWorker runs the Dockerfile's build step (with
// its environment: CGO_ENABLED=0) on this checkout and checks that the
// binary is static, so that it runs in the empty image, and that it is the
// worker: started with no configuration it refuses, naming the variables.
// A cold build cache under a loaded CI machine makes the static build slow:
// the timeout only stops a hang.
func TestDockerfileBuildsAStaticWorker(t *testing.T) {
	dir := t.TempDir()
	script, program := buildStep(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "PROGRAM="+program)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s (PROGRAM=%s): %v\n%s", script, program, err, out)
	}
	bin := filepath.Join(dir, "worker")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary has a dynamic loader: it would not run in an image FROM scratch")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs %v", libs)
	}
	run := exec.CommandContext(ctx, bin)
	run.Env = []string{} // as in the image before the Deployment's env
	out, err := run.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "ASYNQ_REDIS_URL") {
		t.Fatalf("the static worker with no configuration: %v\n%s\nwant exit 1 naming ASYNQ_REDIS_URL", err, out)
	}
	t.Logf("%s (PROGRAM=%s): a static ELF; without configuration: %s", script, program, strings.SplitN(string(out), "\n", 2)[0])
}

// TestImageBuilds builds the image where a container engine answers.
func TestImageBuilds(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil || exec.Command(docker, "info").Run() != nil {
		t.Skip("no Docker engine answers here: the image build is not tested (TestDockerfileBuildsAStaticWorker runs its go build step)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, docker, "build", "-f", "deploy/Dockerfile", "-t", "asynqlock-worker:test", ".")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
}
