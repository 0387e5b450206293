package pagelog_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the pages whose Go code and links are checked: the front
// page and every page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, pages...)
}

// exampleFile is an example*_test.go file as the docs show code: its
// leading tabs as four spaces each.
type exampleFile struct {
	path, shown string
	imports     map[string]bool
}

// exampleFiles reads every example*_test.go file of the repository (the
// root module and the modules beside it: metrics, raftstore), leaving out
// files with build constraints, which go test may not compile.
func exampleFiles(t *testing.T) []exampleFile {
	t.Helper()
	var files []exampleFile
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), "example") || !strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), "\n//go:build ") || strings.HasPrefix(string(src), "//go:build ") {
			return nil
		}
		ef := exampleFile{path: path, shown: shownTabs(string(src)), imports: map[string]bool{}}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			ef.imports[p] = true
		}
		files = append(files, ef)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// shownTabs writes each leading tab as four spaces, as the docs do.
func shownTabs(s string) string {
	return regexp.MustCompile(`(?m)^\t+`).ReplaceAllStringFunc(s, func(tabs string) string {
		return strings.Repeat("    ", len(tabs))
	})
}

var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```$")

// TestDocsGoBlocksAreCompiledExamples: every Go block of README.md and
// docs/*.md is code that compiles and runs. Each declaration it shows (a
// function with its comment, a type) is, word for word (tabs shown as
// four spaces), one of an example*_test.go file of the repository, which
// go test compiles, and is called there (by an Example function, whose
// // Output: checks what it does); each import it shows is one of that
// file's. A block that does not parse, that shows statements outside a
// function, or whose code is in no example file fails: write it as a
// function of an example file, and show it as it is there.
func TestDocsGoBlocksAreCompiledExamples(t *testing.T) {
	examples := exampleFiles(t)
	blocks := 0
	for _, page := range docFiles(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllStringSubmatchIndex(string(text), -1) {
			blocks++
			line := 1 + strings.Count(string(text[:m[0]]), "\n")
			checkGoBlock(t, page+":"+strconv.Itoa(line), string(text[m[2]:m[3]]), examples)
		}
	}
	if blocks == 0 {
		t.Fatal("no Go block in README.md or docs/*.md: is the fence still ```go?")
	}
}

// checkGoBlock checks one Go block (see TestDocsGoBlocksAreCompiledExamples).
func checkGoBlock(t *testing.T, where, block string, examples []exampleFile) {
	t.Helper()
	const pkg = "package shown\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, where, pkg+block, parser.ParseComments)
	if err != nil {
		t.Errorf("%s: the Go block does not parse as a file of imports and declarations: %v", where, err)
		return
	}
	src := pkg + block
	var found *exampleFile
	decls := 0
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			continue
		}
		decls++
		start := d.Pos()
		if doc := declDoc(d); doc != nil {
			start = doc.Pos()
		}
		shown := src[fset.Position(start).Offset:fset.Position(d.End()).Offset]
		name := declName(d)
		var in *exampleFile
		for i := range examples {
			if strings.Contains(examples[i].shown, "\n"+shown+"\n") {
				in = &examples[i]
				break
			}
		}
		if in == nil {
			t.Errorf("%s: %s is in no example*_test.go file as shown (write it there, so that it compiles and runs, and show it word for word):\n%s", where, name, shown)
			continue
		}
		if _, isFunc := d.(*ast.FuncDecl); isFunc && strings.Count(in.shown, name+"(") < 2 {
			t.Errorf("%s: %s of %s is never called there: give it an Example that runs it", where, name, in.path)
		}
		if found == nil {
			found = in
		}
	}
	if decls == 0 {
		t.Errorf("%s: the Go block declares nothing: show a function of an example file", where)
		return
	}
	if found == nil {
		return
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if !found.imports[p] {
			t.Errorf("%s: the block imports %q, which %s does not", where, p, found.path)
		}
	}
}

func declDoc(d ast.Decl) *ast.CommentGroup {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return d.Doc
	case *ast.GenDecl:
		return d.Doc
	}
	return nil
}

func declName(d ast.Decl) string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return d.Name.Name
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				return s.Name.Name
			case *ast.ValueSpec:
				return s.Names[0].Name
			}
		}
	}
	return "a declaration"
}

var (
	anyBlock = regexp.MustCompile("(?ms)^```.*?^```$")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// TestDocsLinksResolve: the links between README.md and the pages of docs/
// lead somewhere: a link from a page of docs/, or into docs/, names a file
// that exists, and a link to a heading (#anchor) of a Markdown file names
// one of its headings (as GitHub spells anchors).
func TestDocsLinksResolve(t *testing.T) {
	for _, page := range docFiles(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		prose := anyBlock.ReplaceAllString(string(text), "")
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			ok := false
			for _, h := range heading.FindAllStringSubmatch(anyBlock.ReplaceAllString(string(b), ""), -1) {
				if headingAnchor(h[1]) == anchor {
					ok = true
					break
				}
			}
			if !ok {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", page, target, file, anchor)
			}
		}
	}
}

// headingAnchor is GitHub's anchor of a heading: lower case, spaces as
// hyphens, every other character that is not a letter, digit, hyphen or
// underscore left out.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}
