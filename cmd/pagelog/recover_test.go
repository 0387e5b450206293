package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// TestRecover: a torn tail is cut by plain recover; damage in a sealed
// segment is reported (exit 1, nothing cut) until --truncate-at-damage.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	l, err := engine.Open(dir, engine.Options{SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	var flipPos int64
	for i := 0; i < 100; i++ {
		if _, err := l.Append([]byte(strings.Repeat("x", 90))); err != nil {
			t.Fatal(err)
		}
	}
	for ri := range l.Inspect(10) {
		flipPos = ri.Position
		break
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[flipPos+30] ^= 0x10
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}

	var out, errb strings.Builder
	if st := runRecover([]string{"--dir", dir}, nil, &out, &errb); st != 1 {
		t.Fatalf("recover on damage: exit %d, want 1\n%s%s", st, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "damaged: offset 10 in segment 00000000000000000000.log") {
		t.Fatalf("recover did not name the damage:\n%s", out.String())
	}
	ro, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ro.Next() != 100 {
		t.Fatalf("plain recover cut the log: Next %d", ro.Next())
	}
	ro.Close()

	out.Reset()
	if st := runRecover([]string{"--dir", dir, "--truncate-at-damage"}, nil, &out, &errb); st != 0 {
		t.Fatalf("recover --truncate-at-damage: exit %d\n%s%s", st, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "truncated at damage: offset 10") || !strings.Contains(out.String(), "healthy") {
		t.Fatalf("report:\n%s", out.String())
	}
	ro, err = engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if ro.Next() != 10 {
		t.Fatalf("Next after the cut = %d, want 10", ro.Next())
	}
	if st := runRecover([]string{}, nil, &out, &errb); st != 2 {
		t.Fatalf("missing --dir: exit %d", st)
	}
}
