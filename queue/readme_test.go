package queue

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeFeaturesExample: the README shows queueFeaturesExample of
// example_readme_test.go word for word (tabs as four spaces), as the root's
// TestReadmeExamples does for queueExample, so that the README's code is
// code that compiles and runs.
func TestReadmeFeaturesExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "func queueFeaturesExample(")
	j := strings.Index(string(src)[i:], "\n}\n")
	shown := regexp.MustCompile(`(?m)^\t+`).ReplaceAllStringFunc(string(src)[i:i+j+3], func(tabs string) string {
		return strings.Repeat("    ", len(tabs))
	})
	if !strings.Contains(string(readme), shown) {
		t.Errorf("README.md does not show queueFeaturesExample as it is:\n%s", shown)
	}
}
