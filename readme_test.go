package pagelog_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeExamples: the README's Go examples are the functions of
// engine/example_readme_test.go and queue/example_readme_test.go, word for
// word (tabs shown as four spaces), which the Example tests compile and
// run: the README's code cannot drift from code that works.
func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []struct{ file, fn string }{
		{"engine/example_readme_test.go", "logExample"},
		{"queue/example_readme_test.go", "queueExample"},
		{"queue/example_readme_test.go", "storeExample"},
	} {
		src, err := os.ReadFile(ex.file)
		if err != nil {
			t.Fatal(err)
		}
		body := funcSource(t, string(src), ex.fn)
		shown := regexp.MustCompile(`(?m)^\t+`).ReplaceAllStringFunc(body, func(tabs string) string {
			return strings.Repeat("    ", len(tabs))
		})
		if !strings.Contains(string(readme), "```go\n") || !strings.Contains(string(readme), shown) {
			t.Errorf("README.md does not show %s of %s as it is:\n%s", ex.fn, ex.file, shown)
		}
	}
}

// funcSource returns the source of the top-level function name in src.
func funcSource(t *testing.T, src, name string) string {
	t.Helper()
	i := strings.Index(src, "func "+name+"(")
	if i < 0 {
		t.Fatalf("no func %s", name)
	}
	j := strings.Index(src[i:], "\n}\n")
	return src[i : i+j+3]
}
