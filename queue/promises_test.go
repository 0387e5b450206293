package queue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/addrspace"
	"github.com/pagelog/pagelog/internal/testkit"
)

// The queue's promises, one test each; every one failed before its fix.

// TestQueueOffsetsNeverReusedAfterPowerLoss: under SyncInterval, a power
// failure loses the log's unsynced tail; the offsets a durable queue.head
// knows were given out are never given to a new message.
func TestQueueOffsetsNeverReusedAfterPowerLoss(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	opts := func(o *Options) {
		o.Log.Sync = engine.SyncInterval
		o.Log.SyncInterval = time.Hour
		o.CheckpointInterval = 20 * time.Millisecond
	}
	mustCloseQueue(t, openTestQueue(t, dir, clock, opts))
	// What the disk holds once the queue was created: nothing was synced
	// after this but queue.head, which is written with fsync.
	disk := t.TempDir()
	testkit.MustCopyDir(t, dir, disk, true)
	for _, p := range []string{"log.clean", "deletes/log.clean"} {
		_ = os.Remove(filepath.Join(disk, p)) // a writable open removes them first
	}

	q := openTestQueue(t, dir, clock, opts)
	for i := range 10 {
		mustSend(t, q, fmt.Sprint("body ", i))
	}
	for range 3 {
		m, _ := tryRecv(t, q)
		mustDelete(t, q, m.Offset)
	}
	if m, _ := tryRecv(t, q); m.Offset != 3 {
		t.Fatalf("received %d, want 3", m.Offset)
	}
	clock.Advance(20 * time.Millisecond) // the head checkpoint: head 3, end 10
	if st := q.Stats(); st.Checkpointed != 3 || st.CheckpointError != nil {
		t.Fatalf("checkpoint: %+v", st)
	}
	head, err := os.ReadFile(filepath.Join(dir, headName))
	if err != nil {
		t.Fatal(err)
	}
	// The power fails: only queue.head reached the disk.
	if err := os.WriteFile(filepath.Join(disk, headName), head, 0o600); err != nil {
		t.Fatal(err)
	}
	mustCloseQueue(t, q)

	q = openTestQueue(t, disk, clock, opts)
	rec := q.Recovery()
	if rec.Lost != 7 || rec.Head != 10 {
		t.Fatalf("recovery: head %d, lost %d; want the 7 undeleted messages of the 10 offsets queue.head knows (%+v)", rec.Head, rec.Lost, rec)
	}
	if off := mustSend(t, q, "new"); off < 10 {
		t.Fatalf("a new message took offset %d, given out before the power failure", off)
	}
	// The lost offsets are a reported range of the log, never served.
	l := q.log
	if _, err := l.Read(3); !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("Read of a lost offset: %v", err)
	}
	mustCloseQueue(t, q)
	q = openTestQueue(t, disk, clock, opts) // and a second open keeps it so
	defer mustCloseQueue(t, q)
	if rec := q.Recovery(); rec.Lost != 0 || rec.Head != 10 {
		t.Fatalf("second recovery: %+v", rec)
	}
}

// TestQueueDamagedDeleteRecord: one damaged delete record costs at most one
// redelivery; the deletes after it hold.
func TestQueueDamagedDeleteRecord(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	for i := range 10 {
		mustSend(t, q, fmt.Sprint("body ", i))
	}
	for range 10 {
		tryRecv(t, q)
	}
	for off := uint64(1); off < 10; off++ {
		mustDelete(t, q, off)
	}
	// Stop uncleanly: the files as the page cache holds them, no clean
	// markers.
	crashed := t.TempDir()
	testkit.MustCopyDir(t, dir, crashed, true)
	mustCloseQueue(t, q)
	const rec3 = 2 * (16 + 8) // the third delete record, naming offset 3
	path := filepath.Join(crashed, deletesDir, "00000000000000000000.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[rec3+16+7] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	q = openTestQueue(t, crashed, clock)
	defer mustCloseQueue(t, q)
	rec := q.Recovery()
	if len(rec.DeleteDamage) != 1 || rec.DeleteRecords != 8 {
		t.Fatalf("recovery: %d delete records, damage %q; want 8 and one damaged", rec.DeleteRecords, rec.DeleteDamage)
	}
	wantRedelivery(t, q, []uint64{0, 3})
}

// TestQueueStaleBodyNeverForeign: a body stays its own while its receiver's
// deadline runs, whatever happens to the message and its segment; after,
// it may read zeros or its own queue's bytes, never another queue's.
func TestQueueStaleBodyNeverForeign(t *testing.T) {
	clock := newFakeClock()
	small := func(o *Options) {
		o.Log.SegmentBytes = 4096
		o.Visibility = 10 * time.Second
		o.CheckpointInterval = time.Second
	}
	q1 := openTestQueue(t, t.TempDir(), clock, small)
	defer mustCloseQueue(t, q1)
	for i := range 60 {
		mustSend(t, q1, fmt.Sprintf("queue one, message %03d %s", i, strings.Repeat(".", 80)))
	}
	a, _ := tryRecv(t, q1) // worker A
	if a.Offset != 0 {
		t.Fatalf("A got %d", a.Offset)
	}
	clock.Advance(11 * time.Second) // A's deadline passes
	b, _ := tryRecv(t, q1)          // worker B gets the same message
	if b.Offset != 0 || b.Receives != 2 {
		t.Fatalf("B got %+v", b)
	}
	own := bytes.Clone(b.Body)
	mustDelete(t, q1, 0) // A's late delete
	for off := uint64(1); off < 50; off++ {
		m, _ := tryRecv(t, q1)
		mustDelete(t, q1, m.Offset)
	}
	clock.Advance(time.Second) // checkpoint: the first segments are dropped
	if st := q1.Stats(); st.Checkpointed < 40 || q1.log.First() == 0 {
		t.Fatalf("the head's segments were not dropped: %+v, first %d", st, q1.log.First())
	}
	if !bytes.Equal(b.Body, own) {
		t.Fatalf("B's body changed within B's deadline: %q", b.Body)
	}
	q2 := openTestQueue(t, t.TempDir(), clock, small)
	defer mustCloseQueue(t, q2)
	for range 100 {
		mustSend(t, q2, "tenant-2 SECRET card 4111 1111 1111 1111 "+strings.Repeat("!", 60))
	}
	for range 20 {
		m, _ := tryRecv(t, q2)
		mustDelete(t, q2, m.Offset)
	}
	if !bytes.Equal(b.Body, own) {
		t.Fatalf("B's body changed within B's deadline after another queue mapped segments: %q", b.Body)
	}
	clock.Advance(10 * time.Second) // B's deadline passes: the body is stale now
	for range 100 {
		mustSend(t, q2, "tenant-2 SECRET again "+strings.Repeat("!", 80))
	}
	if bytes.Contains(b.Body, []byte("tenant-2")) {
		t.Fatalf("a stale body of one queue shows another queue's bytes: %q", b.Body)
	}
	if !bytes.Equal(b.Body, own) && !bytes.Equal(b.Body, make([]byte, len(b.Body))) && !bytes.HasPrefix(b.Body, []byte("queue one")) {
		t.Fatalf("a stale body reads neither its own bytes, zeros nor its own queue's: %q", b.Body)
	}
}

// TestQueueAddressSpaceAcrossReopens: open, fill, reopen and close cycles
// of a queue with the default 64 MiB segments do not grow the address space
// (freed ranges of any size are reused by the same queue).
func TestQueueAddressSpaceAcrossReopens(t *testing.T) {
	dir := t.TempDir()
	grew := addressSpaceGrowth(t, func() {
		openSendClose(t, dir, 200)
		openSendClose(t, dir, 0)
	})
	if grew > 64<<20 {
		t.Fatalf("20 cycles grew the address space by %d MiB (64 MiB per cycle would be the leak)", grew>>20)
	}
}

// TestQueueAddressSpaceOfClosedQueuesIsGivenBack: a process that opens,
// fills and closes queue after queue, each in a directory of its own,
// keeps of each closed queue past the idle budget the pages its records
// took (as zero pages, for stale bodies), not the 64 MiB segments it
// mapped: a 32-bit process ran out of address space after a few dozen
// queues otherwise.
func TestQueueAddressSpaceOfClosedQueuesIsGivenBack(t *testing.T) {
	// Closed queues' ranges beyond the budget are given back: a budget
	// of 0 gives back every one.
	defer addrspace.SetIdleBudget(addrspace.SetIdleBudget(0))
	grew := addressSpaceGrowth(t, func() { openSendClose(t, t.TempDir(), 200) })
	if grew > 64<<20 {
		t.Fatalf("20 queues opened and closed one after another grew the address space by %d MiB (64 MiB per queue would be the leak)", grew>>20)
	}
}

// addressSpaceGrowth runs cycle once, then 20 times, and returns how much
// the 20 grew the process's address space.
func addressSpaceGrowth(t *testing.T, cycle func()) int64 {
	t.Helper()
	cycle()
	before := vmSize(t)
	for range 20 {
		cycle()
	}
	return vmSize(t) - before
}

// openSendClose opens the queue in dir with the default options, sends n
// messages of 1000 bytes and closes it.
func openSendClose(t *testing.T, dir string, n int) {
	t.Helper()
	q, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := q.Send(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// vmSize returns the process's address space in bytes.
func vmSize(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmSize")
	return 0
}

// TestQueueCyclesUnderAddressLimit runs 30 open, fill, reopen and close
// cycles in a child process limited to 2.4 GB of address space (ulimit -v
// 2400000): it used to fail with ENOMEM on the 15th.
func TestQueueCyclesUnderAddressLimit(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_VLIMIT_DIR"); dir != "" {
		if err := limitAddressSpace(2400000 << 10); err != nil {
			fmt.Println("setrlimit:", err)
			os.Exit(3)
		}
		for i := range 30 {
			for range 2 {
				q, err := Open(dir, Options{})
				if err != nil {
					fmt.Printf("cycle %d: %v\n", i, err)
					os.Exit(1)
				}
				for range 100 {
					if _, err := q.Send(make([]byte, 1000)); err != nil {
						fmt.Printf("cycle %d: %v\n", i, err)
						os.Exit(1)
					}
				}
				if err := q.Close(); err != nil {
					fmt.Printf("cycle %d: %v\n", i, err)
					os.Exit(1)
				}
			}
		}
		os.Exit(0)
	}
	cmd := testkit.Child("TestQueueCyclesUnderAddressLimit")
	cmd.Env = append(os.Environ(), "PAGELOG_QUEUE_VLIMIT_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("30 cycles under a 2.4 GB address limit: %v\n%s", err, out)
	}
}

// TestQueueVisibilityBounded: a visibility past the queue's range is
// refused, where it used to make every message ready again at once.
func TestQueueVisibilityBounded(t *testing.T) {
	for _, v := range []time.Duration{MaxVisibility + 1, time.Duration(math.MaxInt64), -1} {
		if _, err := Open(t.TempDir(), Options{Visibility: v}); !errors.Is(err, engine.ErrBadOptions) {
			t.Errorf("Visibility %v: %v, want ErrBadOptions", v, err)
		}
	}
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.Visibility = MaxVisibility })
	defer mustCloseQueue(t, q)
	mustSend(t, q, "x")
	if _, ok := tryRecv(t, q); !ok {
		t.Fatal("no message")
	}
	clock.Advance(24 * time.Hour)
	if m, ok := tryRecv(t, q); ok {
		t.Fatalf("handed out again within a year's visibility: %+v", m)
	}
	_ = context.Background()
}
