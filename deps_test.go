package pagelog_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/pagelog/pagelog"

// allowed lists, for each package of the module, the packages of the module
// it may import (STYLE.md: cmd -> queue -> engine -> internal/segment ->
// {mmapfile, internal/addrspace, internal/record, sparseidx -> warmsearch};
// queue -> inflight; engine never imports queue), and whether it may import
// anything outside the standard library (only golang.org/x/sys, for the
// platform calls).
var allowed = map[string]struct {
	internal []string
	sys      bool
}{
	"warmsearch":          {},
	"internal/record":     {},
	"inflight":            {},
	"sparseidx":           {internal: []string{"warmsearch"}},
	"mmapfile":            {sys: true},
	"internal/addrspace":  {sys: true},
	"internal/segment":    {internal: []string{"mmapfile", "internal/addrspace", "internal/record", "sparseidx"}, sys: true},
	"internal/checkpoint": {},
	"engine":              {internal: []string{"internal/segment", "internal/addrspace", "internal/checkpoint", "internal/record", "mmapfile", "sparseidx"}, sys: true},
	"queue":               {internal: []string{"engine", "inflight", "internal/checkpoint"}},
	"cmd/pagelog":         {internal: []string{"engine", "queue"}, sys: true},
	"bench":               {internal: []string{"engine", "internal/record", "mmapfile"}, sys: true},
	"fuzz":                {internal: []string{"engine", "queue", "internal/record", "internal/segment", "sparseidx", "warmsearch", "inflight"}},
}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Standard     bool
}

// TestImportGraph fails when a package imports against the direction of
// STYLE.md, or brings a dependency other than golang.org/x/sys into the
// library.
func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if name == "" {
			continue
		}
		rule, ok := allowed[name]
		if !ok {
			t.Errorf("package %s is not in the import graph of deps_test.go: add it with its allowed imports", name)
			continue
		}
		seen++
		for _, imp := range p.Imports {
			checkImport(t, name, imp, rule.internal, rule.sys)
		}
	}
	if seen < 5 {
		t.Fatalf("only %d packages listed", seen)
	}
}

func checkImport(t *testing.T, from, imp string, internal []string, sys bool) {
	t.Helper()
	switch {
	case strings.HasPrefix(imp, module+"/"):
		to := strings.TrimPrefix(imp, module+"/")
		for _, a := range internal {
			if a == to {
				return
			}
		}
		t.Errorf("%s imports %s, against the import graph", from, to)
	case strings.HasPrefix(imp, "golang.org/x/sys/"):
		if !sys {
			t.Errorf("%s imports %s: only the platform packages may", from, imp)
		}
	case strings.Contains(strings.Split(imp, "/")[0], "."):
		t.Errorf("%s imports %s: the library takes no dependency without a measured reason", from, imp)
	}
}
