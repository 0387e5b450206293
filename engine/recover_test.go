package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/internal/segment"
)

func buildRecoverLog(t *testing.T) (string, []*os.File) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 4096, IndexIntervalBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 200; i++ {
		if _, err := l.Append(truncBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, nil
}

// flipInSealed flips a body byte of record 30 (in the first, sealed
// segment) and returns its offset.
func flipInSealed(t *testing.T, dir string) uint64 {
	t.Helper()
	l, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pos int64
	for ri := range l.Inspect(30) {
		pos = ri.Position
		break
	}
	l.Close()
	path := filepath.Join(dir, segment.Name(0, segment.LogSuffix))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[pos+20] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return 30
}

func TestRecoverReportsDamageWithoutCutting(t *testing.T) {
	dir, _ := buildRecoverLog(t)
	bad := flipInSealed(t, dir)
	idx := filepath.Join(dir, segment.Name(0, segment.IndexSuffix))
	if err := os.Remove(idx); err != nil {
		t.Fatal(err)
	}
	rep, err := Recover(dir, Options{}, RecoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Damage == nil || rep.Damage.Offset != bad || rep.TruncatedAt != nil {
		t.Fatalf("damage %+v truncated %v", rep.Damage, rep.TruncatedAt)
	}
	if len(rep.IndexesRewritten) == 0 || rep.IndexesRewritten[0] != segment.Name(0, segment.LogSuffix) {
		t.Fatalf("indexes rewritten: %v", rep.IndexesRewritten)
	}
	if _, err := os.Stat(idx); err != nil {
		t.Fatalf("index not written back: %v", err)
	}
	if len(rep.After.IndexProblems) != 0 || rep.After.Damaged != 1 {
		t.Fatalf("after: %+v", rep.After)
	}
	l, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Next() != 200 {
		t.Fatalf("Next = %d: damage must never be cut without TruncateAtDamage", l.Next())
	}
	r, err := l.Read(bad + 1)
	if err != nil || !bytes.Equal(r.Body, truncBody(bad+1)) {
		t.Fatalf("neighbour of the damage: %v", err)
	}
	r.Release()
}

func TestRecoverTruncateAtDamage(t *testing.T) {
	dir, _ := buildRecoverLog(t)
	bad := flipInSealed(t, dir)
	rep, err := Recover(dir, Options{}, RecoverOptions{TruncateAtDamage: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TruncatedAt == nil || *rep.TruncatedAt != bad || !rep.After.Healthy() || rep.After.Records != bad {
		t.Fatalf("truncated %v after %+v", rep.TruncatedAt, rep.After)
	}
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if off, err := l.Append([]byte("x")); err != nil || off != bad {
		t.Fatalf("append after the cut: %d %v", off, err)
	}
}
