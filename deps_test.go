package pagelog_test

import (
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/pagelog/pagelog"

// rule says what one package of the module may import (STYLE.md: cmd ->
// queue -> engine -> internal/segment -> {mmapfile, internal/addrspace,
// internal/record, sparseidx -> warmsearch}; queue -> inflight; engine,
// queue, internal/segment and internal/checkpoint open the files of a
// log through internal/regfile; engine never imports queue; warmsearch,
// internal/record and inflight use only the standard library; the
// library's only dependency is golang.org/x/sys).
// Its tests (in-package and external) may import what it may, itself, and
// what tests names; nothing outside the standard library and
// golang.org/x/sys ever, since that would enter go.mod.
type rule struct {
	internal []string // packages of the module it may import
	sys      bool     // golang.org/x/sys, for the platform calls
	tests    []string // further packages of the module its tests may import
	testSys  bool     // golang.org/x/sys in its tests (mounts, flock, inotify)
	// testOnly: a package of tests (fuzz/, bench/) whose only non-test
	// file is doc.go, with no code and no import.
	testOnly bool
}

var allowed = map[string]rule{
	"warmsearch":          {},
	"internal/record":     {},
	"inflight":            {},
	"internal/checkpoint": {internal: []string{"internal/regfile"}},
	"internal/regfile":    {sys: true},     // opens regular files only, never through a link
	"internal/stopwatch":  {testSys: true}, // the benchmarks' per-operation timer
	"internal/httpserve":  {},              // what the two servers share: timeouts, connection bound, TLS, token
	"internal/tmpfstest":  {sys: true},     // the full-disk tests' tmpfs: skip, or fail under make test as root
	"sparseidx":           {internal: []string{"warmsearch"}},
	"mmapfile":            {sys: true},
	"internal/addrspace":  {sys: true},
	"internal/segment":    {internal: []string{"mmapfile", "internal/addrspace", "internal/record", "internal/regfile", "sparseidx"}, sys: true, tests: []string{"internal/testkit"}},
	"engine":              {internal: []string{"internal/segment", "internal/addrspace", "internal/checkpoint", "internal/record", "internal/regfile", "mmapfile", "sparseidx"}, sys: true, tests: []string{"internal/tmpfstest", "internal/testkit"}},
	"queue":               {internal: []string{"engine", "inflight", "internal/checkpoint", "internal/regfile"}, tests: []string{"internal/addrspace", "internal/record", "internal/tmpfstest", "internal/testkit"}, testSys: true},
	"cmd/pagelog":         {internal: []string{"engine", "queue", "internal/stopwatch", "internal/httpserve"}, sys: true, tests: []string{"internal/tmpfstest", "internal/testkit"}},
	// The benchmarks measure the engine and the queue through their APIs
	// and the machine's limits through mmapfile; the peers are another
	// module (bench/peers).
	"bench": {testOnly: true, tests: []string{"engine", "queue", "internal/record", "internal/stopwatch", "internal/testkit", "mmapfile"}, testSys: true},
	// The fuzz targets reach into the library's pure layers and the
	// engine and queue; never into cmd or bench.
	"fuzz": {testOnly: true, tests: []string{"engine", "queue", "internal/record", "internal/segment", "internal/testkit", "sparseidx", "warmsearch", "inflight"}},
	// The scaffolding the tests of several packages share (crash
	// children, torn files, /proc readers): for tests only, which
	// TestTestkitOnlyInTests checks in every module.
	"internal/testkit": {sys: true}, // test scaffolding: /proc readers, kill -9, a thread's CPU time
}

// ownModules are directories that hold a module of their own: they may
// import the library, the library never imports them, and their
// dependencies never enter its go.mod.
var ownModules = []string{"bench/peers", "raftstore", "metrics"}

type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
	TestGoFiles  []string
	XTestGoFiles []string
}

// listPackages returns the module's packages as go list sees them, by
// their path inside the module ("" for the root). go list runs once.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	pkgs, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var goList = sync.OnceValues(func() (map[string]pkg, error) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	pkgs := map[string]pkg{}
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
	}
	if len(pkgs) < 5 {
		return nil, fmt.Errorf("go list: only %d packages listed", len(pkgs))
	}
	return pkgs, nil
})

// TestImportGraph fails when a package, or a test of it, imports against
// the direction of STYLE.md, or brings a dependency other than
// golang.org/x/sys into the module.
func TestImportGraph(t *testing.T) {
	for name, p := range listPackages(t) {
		if name == "" {
			continue // this test
		}
		r, ok := allowed[name]
		if !ok {
			t.Errorf("package %s is not in the import graph of deps_test.go: add it with its allowed imports", name)
			continue
		}
		for _, imp := range p.Imports {
			checkImport(t, name, imp, r.internal, r.sys)
		}
		tests := append(append([]string{name}, r.internal...), r.tests...)
		for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
			checkImport(t, name+" (tests)", imp, tests, r.sys || r.testSys)
		}
		if r.testOnly && (!slices.Equal(p.GoFiles, []string{"doc.go"}) || len(p.Imports) > 0) {
			t.Errorf("%s is a package of tests: its only other file is doc.go, with no code (files %v, imports %v)",
				name, p.GoFiles, p.Imports)
		}
	}
}

func checkImport(t *testing.T, from, imp string, internal []string, sys bool) {
	t.Helper()
	switch {
	case strings.HasPrefix(imp, module+"/"):
		to := strings.TrimPrefix(imp, module+"/")
		for _, m := range ownModules {
			if to == m || strings.HasPrefix(to, m+"/") {
				t.Errorf("%s imports %s, a module of its own that the library never depends on", from, to)
				return
			}
		}
		if !slices.Contains(internal, to) {
			t.Errorf("%s imports %s, against the import graph", from, to)
		}
	case strings.HasPrefix(imp, "golang.org/x/sys/"):
		if !sys {
			t.Errorf("%s imports %s: only the platform packages may", from, imp)
		}
	case strings.Contains(strings.Split(imp, "/")[0], "."):
		t.Errorf("%s imports %s: the module takes no dependency but golang.org/x/sys (peers live in bench/peers)", from, imp)
	}
}

// TestTestkitOnlyInTests: internal/testkit, the tests' shared
// scaffolding, is imported by test files only, in every module of the
// repository (raftstore and metrics included, whose graphs
// TestImportGraph does not see).
func TestTestkitOnlyInTests(t *testing.T) {
	const testkit = module + "/internal/testkit"
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" || filepath.ToSlash(path) == "internal/testkit" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == testkit {
				t.Errorf("%s imports %s, which is for tests only", filepath.ToSlash(path), testkit)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestImportGraphModules: the module requires golang.org/x/sys and nothing
// else (go.mod says so, whatever the tests import), and bench/peers,
// raftstore and metrics are modules of their own.
func TestImportGraphModules(t *testing.T) {
	out, err := exec.Command("go", "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path string }
		Replace []struct{ Old struct{ Path string } }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	var req []string
	for _, r := range mod.Require {
		req = append(req, r.Path)
	}
	if mod.Module.Path != module || !slices.Equal(req, []string{"golang.org/x/sys"}) || len(mod.Replace) > 0 {
		t.Errorf("go.mod: module %s requires %v (replaces %v); want %s requiring golang.org/x/sys only",
			mod.Module.Path, req, mod.Replace, module)
	}
	for _, dir := range ownModules {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Errorf("%s has no go.mod of its own: %v", dir, err)
			continue
		}
		if !regexp.MustCompile(`(?m)^module ` + regexp.QuoteMeta(module+"/"+dir) + `\s*$`).Match(b) {
			t.Errorf("%s/go.mod does not declare module %s/%s", dir, module, dir)
		}
	}
}

// TestImportGraphFuzz: every fuzz target of fuzz/ has its seed corpus in
// fuzz/testdata/fuzz/<target> (replayed by make test) and is one of the
// Makefile's FUZZ_TARGETS (run by make fuzz), and every name there is a
// target.
func TestImportGraphFuzz(t *testing.T) {
	p := listPackages(t)["fuzz"]
	var targets []string
	for _, f := range p.TestGoFiles {
		src, err := os.ReadFile(filepath.Join(p.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`).FindAllStringSubmatch(string(src), -1) {
			targets = append(targets, m[1])
		}
	}
	if len(targets) == 0 {
		t.Fatal("no fuzz target found in fuzz/")
	}
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^FUZZ_TARGETS\s*:?=((?:.*\\\n)*.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile defines no FUZZ_TARGETS")
	}
	listed := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
	for _, name := range targets {
		if st, err := os.Stat(filepath.Join(p.Dir, "testdata", "fuzz", name)); err != nil || !st.IsDir() {
			t.Errorf("fuzz target %s has no seed corpus in fuzz/testdata/fuzz/%s", name, name)
		}
		if !slices.Contains(listed, name) {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS: make fuzz never runs it", name)
		}
	}
	for _, name := range listed {
		if !slices.Contains(targets, name) {
			t.Errorf("the Makefile's FUZZ_TARGETS names %s, which is no fuzz target of fuzz/", name)
		}
	}
}

// TestReadmeDependencies: what the README says about the command line's
// dependencies is what cmd/pagelog imports. Its Dependencies section says
// what the command line uses beyond the module ("the standard library
// only", or the modules it names), and the import line under Layout
// ("Imports point one way (cmd -> ...)") names, for each arrow, an import
// that exists, and for cmd every package of the module it imports.
func TestReadmeDependencies(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	pkgs := listPackages(t)
	cmd := pkgs["cmd/pagelog"]
	var external, internal []string
	for _, imp := range cmd.Imports {
		switch {
		case strings.HasPrefix(imp, module+"/"):
			internal = append(internal, strings.TrimPrefix(imp, module+"/"))
		case strings.Contains(strings.Split(imp, "/")[0], "."):
			external = append(external, imp)
		}
	}

	sentence := regexp.MustCompile(`The command line uses ([^.]*(?:\.[a-z][^.]*)*)\.`).FindStringSubmatch(strings.Join(strings.Fields(readme), " "))
	if sentence == nil {
		t.Fatal(`the README's Dependencies section no longer says what the command line uses ("The command line uses ...")`)
	}
	claim := sentence[1]
	switch {
	case strings.Contains(claim, "standard library only"):
		if len(external) > 0 {
			t.Errorf("README: %q, but cmd/pagelog imports %v", sentence[0], external)
		}
	default:
		for _, imp := range external {
			if !strings.Contains(claim, imp) {
				t.Errorf("README: %q does not name %s, which cmd/pagelog imports", sentence[0], imp)
			}
		}
		for _, named := range regexp.MustCompile(`[a-z0-9.-]+\.[a-z]+/[\w./-]+`).FindAllString(claim, -1) {
			if !slices.ContainsFunc(external, func(imp string) bool { return strings.HasPrefix(imp, strings.TrimRight(named, "`")) }) {
				t.Errorf("README: %q names %s, which cmd/pagelog does not import", sentence[0], named)
			}
		}
	}

	line := regexp.MustCompile(`Imports point one way \(([^)]*)\)`).FindStringSubmatch(strings.Join(strings.Fields(readme), " "))
	if line == nil {
		t.Fatal(`the README no longer has its "Imports point one way (...)" line`)
	}
	var fromCmd []string
	for _, e := range arrows(line[1]) {
		from, to := e[0], e[1]
		if from == "cmd" {
			from = "cmd/pagelog"
			fromCmd = append(fromCmd, to)
		}
		p, ok := pkgs[from]
		if !ok {
			t.Errorf("README: %q names %s, which is no package", line[0], e[0])
			continue
		}
		if !slices.Contains(p.Imports, module+"/"+to) {
			t.Errorf("README: %q says %s -> %s, but %s does not import %s", line[0], e[0], to, from, to)
		}
	}
	slices.Sort(fromCmd)
	slices.Sort(internal)
	if !slices.Equal(fromCmd, internal) {
		t.Errorf("README: %q has cmd import %v, but cmd/pagelog imports %v of the module", line[0], fromCmd, internal)
	}
}

// arrows returns the edges of an import line such as "cmd -> engine ->
// {mmapfile, sparseidx -> warmsearch}; queue -> inflight": each "a -> b",
// with a brace group standing for each of its chains' first package.
func arrows(s string) [][2]string {
	var edges [][2]string
	var chain func(s string) []string // parses one chain, returns its heads
	split := func(s string, sep byte) []string {
		var parts []string
		depth, start := 0, 0
		for i := 0; i < len(s); i++ {
			switch {
			case s[i] == '{':
				depth++
			case s[i] == '}':
				depth--
			case depth == 0 && s[i] == sep:
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
		return append(parts, s[start:])
	}
	node := func(s string) []string {
		s = strings.TrimSpace(s)
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			var heads []string
			for _, c := range split(s[1:len(s)-1], ',') {
				heads = append(heads, chain(c)...)
			}
			return heads
		}
		return []string{s}
	}
	chain = func(s string) []string {
		steps := strings.Split(strings.ReplaceAll(s, "->", "\x00"), "\x00")
		// "->" inside braces belongs to the group: rejoin those.
		var elems []string
		for _, st := range steps {
			if n := len(elems); n > 0 && strings.Count(elems[n-1], "{") > strings.Count(elems[n-1], "}") {
				elems[n-1] += "->" + st
				continue
			}
			elems = append(elems, st)
		}
		var prev, first []string
		for i, e := range elems {
			cur := node(e)
			if i == 0 {
				first = cur
			}
			for _, a := range prev {
				for _, b := range cur {
					edges = append(edges, [2]string{a, b})
				}
			}
			prev = cur
		}
		return first
	}
	for _, c := range split(s, ';') {
		if strings.TrimSpace(c) != "" {
			chain(c)
		}
	}
	return edges
}

// TestNoParkedGoFiles: a test is compiled or it is not there. A known bug
// is a failing test that is fixed, or a skipped one that says why; a Go
// file renamed out of the build (*.go.txt, *.go.off ...) is neither.
func TestNoParkedGoFiles(t *testing.T) {
	parked := regexp.MustCompile(`\.go\.[A-Za-z0-9]+$`)
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && parked.MatchString(d.Name()) {
			t.Errorf("%s: a Go file out of the build; make it a test that runs, or remove it", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTestFilesNamedForBehaviour: every test file of the repository (all
// its modules) and every test, benchmark and fuzz target is named for the
// behaviour it proves (CONTRIBUTING.md), never for the round or the probe
// that found a bug: no *_test.go file with attack, regress or hostile in
// its name, no Test/Benchmark/Fuzz function named Attack..., Regress...,
// Hostile..., Probe... or holding Attack<n>, and no function of a test
// file carries a round's tag (a2Check, e10Walk).
func TestTestFilesNamedForBehaviour(t *testing.T) {
	badFile := regexp.MustCompile(`(?i)attack|regress|hostile`)
	funcs := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	badFunc := regexp.MustCompile(`^(Test|Benchmark|Fuzz)(Attack|Regress|Hostile|Probe)|Attack[0-9]`)
	tagged := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?([a-z]{1,2}[0-9]+[A-Z]\w*)\(`)
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(path)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		if badFile.MatchString(d.Name()) {
			t.Errorf("%s: a test file named for history; name it <code>_<behaviour>_test.go beside the code it tests", rel)
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcs.FindAllSubmatch(src, -1) {
			if name := string(m[1]); badFunc.MatchString(name) {
				t.Errorf("%s: %s is named for history; name it for the behaviour it proves (Test<Area><Behaviour>)", rel, name)
			}
		}
		for _, m := range tagged.FindAllSubmatch(src, -1) {
			t.Errorf("%s: %s carries a round's tag; name it for what it does", rel, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
