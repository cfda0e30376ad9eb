// Package readme holds every Go snippet of the repository's README.md, as
// code that compiles and runs: readme_test.go runs each one on embedded
// Redis servers, and checks that the README's text is this code (each
// snippet between "// README:begin" and "// README:end" comments; the quick
// start is examples/quickstart/main.go in full), so neither can drift.
package readme
