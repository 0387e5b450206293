package mmapfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The sync that reaches stable storage is tried first; where it fails,
// the plain one runs and its result is the answer; when both fail the
// error is the plain one's.
func TestSyncFallsBackWhenFullSyncFails(t *testing.T) {
	errFull, errPlain := errors.New("full"), errors.New("plain")
	var calls []string
	full := func(err error) func() error { return func() error { calls = append(calls, "full"); return err } }
	plain := func(err error) func() error { return func() error { calls = append(calls, "plain"); return err } }
	if err := syncWithFallback(full(nil), plain(errPlain)); err != nil || len(calls) != 1 {
		t.Errorf("full works: %v after %v; want nil after full alone", err, calls)
	}
	calls = nil
	if err := syncWithFallback(full(errFull), plain(nil)); err != nil || len(calls) != 2 {
		t.Errorf("full fails, plain works: %v after %v; want nil after both", err, calls)
	}
	calls = nil
	if err := syncWithFallback(full(errFull), plain(errPlain)); !errors.Is(err, errPlain) {
		t.Errorf("both fail: %v; want the plain sync's error", err)
	}
}

// A reservation that does not extend the file (F_PREALLOCATE) leaves the
// size to allocateWith; one not supported there falls back to writing
// zeros; its error is returned as is.
func TestAllocateWithExtendsOrWritesZeros(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := func() int64 {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if err := allocateWith(f, 0, 8192, func() (bool, error) { return true, nil }); err != nil || size() != 8192 {
		t.Errorf("reserved: %v, size %d; want 8192", err, size())
	}
	if err := allocateWith(f, 4096, 4096, func() (bool, error) { return true, nil }); err != nil || size() != 8192 {
		t.Errorf("within the file: %v, size %d; want it kept at 8192", err, size())
	}
	if err := allocateWith(f, 8192, 4096, func() (bool, error) { return false, nil }); err != nil || size() != 12288 {
		t.Errorf("unsupported: %v, size %d; want zeros written to 12288", err, size())
	}
	full := errors.New("no space")
	if err := allocateWith(f, 12288, 4096, func() (bool, error) { return true, full }); !errors.Is(err, full) || size() != 12288 {
		t.Errorf("reserve fails: %v, size %d; want its error and no change", err, size())
	}
}
