package fuzz

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite the generated seed corpora in testdata/fuzz")

// seed is one generated seed input: the arguments of a fuzz function.
type seed struct {
	name string
	args []any
}

// seedCorpora lists, for each fuzz target, the function that generates its
// seeds. The generators are deterministic, so the files can be checked.
var seedCorpora = map[string]func(testing.TB) []seed{
	"FuzzRecordDecode":      recordDecodeSeeds,
	"FuzzRecordRoundTrip":   recordRoundTripSeeds,
	"FuzzOpenActiveSegment": activeSegmentSeeds,
	"FuzzIndexFiles":        indexFilesSeeds,
	"FuzzWarmSearch":        warmSearchSeeds,
	"FuzzSparseIndex":       sparseIndexSeeds,
	"FuzzQueueOps":          queueOpsSeeds,
	"FuzzFollowTorn":        followTornSeeds,
}

// TestSeedCorpus checks that testdata/fuzz holds the generated seeds, as
// the generators write them today; with -write-seeds it writes them.
func TestSeedCorpus(t *testing.T) {
	names := make([]string, 0, len(seedCorpora))
	for name := range seedCorpora {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, target := range names {
		dir := filepath.Join("testdata", "fuzz", target)
		seeds := seedCorpora[target](t)
		want := map[string]bool{}
		for _, s := range seeds {
			file := "seed-" + s.name
			if want[file] {
				t.Fatalf("%s: two seeds named %s", target, s.name)
			}
			want[file] = true
			path := filepath.Join(dir, file)
			data := marshalSeed(s.args...)
			if *writeSeeds {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: %v (run go test ./fuzz/ -run TestSeedCorpus -write-seeds)", target, err)
				continue
			}
			if !bytes.Equal(got, data) {
				t.Errorf("%s: %s is not what its generator writes (run with -write-seeds)", target, path)
			}
		}
		// Generated seeds that are no longer generated.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "seed-") && !want[e.Name()] {
				if *writeSeeds {
					_ = os.Remove(filepath.Join(dir, e.Name()))
				} else {
					t.Errorf("%s: %s is no longer generated", target, e.Name())
				}
			}
		}
	}
}

// marshalSeed writes arguments in the "go test fuzz v1" corpus format.
func marshalSeed(args ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case int, int64, uint32, uint64, uint16, bool:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		default:
			panic(fmt.Sprintf("marshalSeed: type %T", a))
		}
	}
	return b.Bytes()
}
