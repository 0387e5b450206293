package engine

// Machinery shared by the tests of the mistakes a careless or unlucky user
// makes (README.md, "Mistakes the log guards against"); each checks only
// what the documentation promises:
//
//   - TestOpenDamagedFiles (open_damaged_files_test.go) damages every file
//     of a log directory in every way a user can (flip a byte, empty,
//     remove, cut in half, append garbage, rename, leave stray files) and
//     opens the result read-only, for writing, and with Recover.
//   - TestConcurrentCallsBesideCloseDropTruncate
//     (concurrency_every_method_test.go) calls every public method from
//     many goroutines while Close, DropBefore and Truncate run, writable
//     and read-only.
//   - TestOptionsExtremeSettings (options_extreme_test.go) opens logs with
//     extreme Options.
//
// Every check runs in a goroutine of its own with panic-on-fault set, so
// that a panic or a fault on a mapping (SIGBUS, SIGSEGV) becomes a failure
// of one case instead of the end of the test binary, and under a timeout,
// so that a hang becomes a failure too. Failures are collected and
// reported per case; nothing is skipped after the first.
//
// Run: go test -count=1 -run 'TestOpenDamagedFiles|TestConcurrentCallsBesideCloseDropTruncate|TestOptionsExtremeSettings' ./engine
// (add -race). PAGELOG_CONCURRENCY_SEED repeats a run of
// TestConcurrentCallsBesideCloseDropTruncate.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/record"
)

// ---------------------------------------------------------------------------
// Shared machinery.

// caseFailures collects the failures of one case (from any goroutine).
type caseFailures struct {
	mu   sync.Mutex
	msgs []string
	more int
}

const maxCaseFailures = 12

func (f *caseFailures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.msgs) >= maxCaseFailures {
		f.more++
		return
	}
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *caseFailures) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.msgs)
	if f.more > 0 {
		out = append(out, fmt.Sprintf("... and %d more failures", f.more))
	}
	return out
}

// goGuarded runs fn in a goroutine with panic-on-fault set; a panic (or a
// fault on a mapping) is added to f.
func goGuarded(wg *sync.WaitGroup, f *caseFailures, who string, fn func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		debug.SetPanicOnFault(true)
		defer func() {
			if r := recover(); r != nil {
				f.add("%s: panic: %v\n%s", who, r, guardedPanicStack())
			}
		}()
		fn()
	}()
}

// guardedPhase runs fn, turning a panic into a failure of f.
func guardedPhase(f *caseFailures, who string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			f.add("%s: panic: %v\n%s", who, r, guardedPanicStack())
		}
	}()
	fn()
}

// guardedPanicStack is the stack of a panic, from the frame that panicked.
func guardedPanicStack() string {
	lines := strings.Split(string(debug.Stack()), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") {
			lines = lines[i+2:]
			break
		}
	}
	return "        " + strings.Join(lines[:min(len(lines), 12)], "\n        ")
}

// runGuardedCase runs fn as one case: in its own goroutine, with panic-on-fault,
// under a timeout. It returns the failures.
func runGuardedCase(timeout time.Duration, fn func(f *caseFailures)) []string {
	f := &caseFailures{}
	var wg sync.WaitGroup
	goGuarded(&wg, f, "case", func() { fn(f) })
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		f.add("timed out after %v: a hang or an endless loop; the engine's goroutines:\n%s", timeout, engineGoroutineStacks())
	}
	return f.list()
}

// caseScratchRoot is a scratch directory for many small logs: under /dev/shm
// when it is there (the cases create thousands of files, and the damage
// under test does not depend on the file system), else the test's temporary
// directory; PAGELOG_CASE_DIR chooses another parent (a disk, say).
func caseScratchRoot(t *testing.T) string {
	parent := os.Getenv("PAGELOG_CASE_DIR")
	if parent == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			parent = "/dev/shm"
		}
	}
	if parent != "" {
		if dir, err := os.MkdirTemp(parent, "pagelog-cases-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			t.Logf("scratch directory %s", dir)
			return dir
		}
	}
	return t.TempDir()
}

// plainRecordChecksum is the CRC-32C a record without attributes stores: over
// its id and body.
func plainRecordChecksum(off uint64, body []byte) uint32 {
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], off)
	return crc32.Update(crc32.Checksum(id[:], record.Table), record.Table, body)
}

func firstThreeAndCount(s []string) []string {
	if len(s) > 3 {
		return append(slices.Clone(s[:3]), fmt.Sprintf("... %d more", len(s)-3))
	}
	return s
}

// engineGoroutineStacks returns the stacks of the goroutines that are inside
// the engine (for a hang).
func engineGoroutineStacks() string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pagelog/engine.(*") || strings.Contains(g, "pagelog/internal/segment.") {
			lines := strings.Split(g, "\n")
			out = append(out, "        "+strings.Join(lines[:min(len(lines), 24)], "\n        "))
		}
	}
	if len(out) > 8 {
		out = append(out[:8], fmt.Sprintf("        ... %d more goroutines", len(out)-8))
	}
	return strings.Join(out, "\n")
}
