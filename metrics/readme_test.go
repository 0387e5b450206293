package metrics_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's Monitoring section shows registerMetrics of example_test.go
// word for word (tabs as four spaces), which ExampleNewQueueCollector
// compiles and runs.
func TestReadmeShowsRegisterMetrics(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "func registerMetrics(")
	j := strings.Index(string(src)[i:], "\n}\n")
	if i < 0 || j < 0 {
		t.Fatal("no registerMetrics in example_test.go")
	}
	shown := regexp.MustCompile(`(?m)^\t+`).ReplaceAllStringFunc(string(src)[i:i+j+3], func(tabs string) string {
		return strings.Repeat("    ", len(tabs))
	})
	if !strings.Contains(string(readme), shown) {
		t.Errorf("README.md does not show registerMetrics as it is:\n%s", shown)
	}
}
