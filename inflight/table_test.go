package inflight

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"
)

func mustCheck(t *testing.T, tb *Table) {
	t.Helper()
	if err := tb.check(); err != nil {
		t.Fatal(err)
	}
}

func mustAdd(t *testing.T, tb *Table, off uint64, deadline int64) {
	t.Helper()
	if err := tb.Add(off, deadline); err != nil {
		t.Fatalf("Add(%d): %v", off, err)
	}
}

func TestAddExpirePop(t *testing.T) {
	tb := New(100)
	mustAdd(t, tb, 100, 30)
	mustAdd(t, tb, 101, 10)
	mustAdd(t, tb, 102, 20)
	if d, ok := tb.NextDeadline(); d != 10 || !ok {
		t.Fatalf("NextDeadline = %d %v, want 10 true", d, ok)
	}
	if n := tb.Expire(9); n != 0 {
		t.Fatalf("Expire(9) = %d, want 0", n)
	}
	if n := tb.Expire(20); n != 2 {
		t.Fatalf("Expire(20) = %d, want 2", n)
	}
	if tb.InFlight() != 1 || tb.ReadyAgain() != 2 || tb.Len() != 3 {
		t.Fatalf("in flight %d ready %d len %d", tb.InFlight(), tb.ReadyAgain(), tb.Len())
	}
	off, rc, ok := tb.PopReady(50)
	if off != 101 || rc != 2 || !ok {
		t.Fatalf("PopReady = %d %d %v, want 101 2 true", off, rc, ok)
	}
	if d, rc, in, ok := tb.Get(101); d != 50 || rc != 2 || !in || !ok {
		t.Fatalf("Get(101) = %d %d %v %v", d, rc, in, ok)
	}
	if d, rc, in, ok := tb.Get(102); d != 0 || rc != 1 || in || !ok {
		t.Fatalf("Get(102) = %d %d %v %v", d, rc, in, ok)
	}
	if _, _, _, ok := tb.Get(103); ok {
		t.Fatal("Get(103) found an offset never handed out")
	}
	mustCheck(t, tb)
}

func TestPopReadyEmpty(t *testing.T) {
	tb := New(0)
	if _, _, ok := tb.PopReady(1); ok {
		t.Fatal("PopReady on an empty table succeeded")
	}
	if _, ok := tb.NextDeadline(); ok {
		t.Fatal("NextDeadline on an empty table succeeded")
	}
}

func TestDoneStates(t *testing.T) {
	tb := New(10)
	for off := uint64(10); off < 13; off++ {
		mustAdd(t, tb, off, int64(off))
	}
	tb.Expire(11) // 10 and 11 ready again, 12 in flight
	cases := []struct {
		off  uint64
		want State
		err  error
	}{
		{12, StateInFlight, nil},
		{11, StateReady, nil},
		{11, StateDone, nil},
		{9, StateDone, nil},
		{13, StateUnknown, ErrUnknown},
		{1 << 40, StateUnknown, ErrUnknown},
		{10, StateReady, nil},
	}
	for _, c := range cases {
		st, err := tb.Done(c.off)
		if st != c.want || !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("Done(%d) = %v %v, want %v %v", c.off, st, err, c.want, c.err)
		}
	}
	if tb.Head() != 13 || tb.Len() != 0 {
		t.Fatalf("head %d len %d, want 13 0", tb.Head(), tb.Len())
	}
	mustCheck(t, tb)
}

// TestHeadAcrossChunks deletes out of order around chunk boundaries and
// checks the head after every delete.
func TestHeadAcrossChunks(t *testing.T) {
	tb := New(60)
	for off := uint64(60); off < 300; off++ {
		mustAdd(t, tb, off, 1)
	}
	steps := []struct{ done, head uint64 }{
		{64, 60}, {65, 60}, {128, 60}, {61, 60}, {62, 60}, {63, 60},
		{60, 66}, {66, 67}, {200, 67},
	}
	for _, s := range steps {
		tb.Done(s.done)
		if tb.Head() != s.head {
			t.Fatalf("after Done(%d) head %d, want %d", s.done, tb.Head(), s.head)
		}
		mustCheck(t, tb)
	}
	for off := uint64(299); off >= 67; off-- {
		tb.Done(off)
	}
	if tb.Head() != 300 || tb.dir.n > 1 {
		t.Fatalf("head %d, %d chunks, want 300 and at most 1", tb.Head(), tb.dir.n)
	}
	mustCheck(t, tb)
}

func TestRestore(t *testing.T) {
	tb := New(10)
	for _, off := range []uint64{12, 10, 11, 15, 5} {
		tb.MarkDone(off)
	}
	if err := tb.AddReady(14, 3); err != nil {
		t.Fatal(err)
	}
	if err := tb.AddReady(12, 1); !errors.Is(err, ErrOrder) {
		t.Fatalf("AddReady of a done offset: %v, want ErrOrder", err)
	}
	if err := tb.Add(10, 1); !errors.Is(err, ErrOrder) {
		t.Fatalf("Add during restore: %v, want ErrOrder", err)
	}
	if err := tb.SetCursor(15); !errors.Is(err, ErrOrder) {
		t.Fatalf("SetCursor below a registered offset: %v, want ErrOrder", err)
	}
	if err := tb.SetCursor(20); err != nil {
		t.Fatal(err)
	}
	if tb.Head() != 13 || tb.Cursor() != 20 || tb.ReadyAgain() != 6 || tb.InFlight() != 0 {
		t.Fatalf("head %d cursor %d ready %d in flight %d, want 13 20 6 0",
			tb.Head(), tb.Cursor(), tb.ReadyAgain(), tb.InFlight())
	}
	want := []struct {
		off uint64
		rc  int
	}{{13, 1}, {14, 4}, {16, 1}, {17, 1}, {18, 1}, {19, 1}}
	for _, w := range want {
		off, rc, ok := tb.PopReady(100)
		if off != w.off || rc != w.rc || !ok {
			t.Fatalf("PopReady = %d %d %v, want %d %d true", off, rc, ok, w.off, w.rc)
		}
	}
	mustAdd(t, tb, 20, 100)
	mustCheck(t, tb)
}

func TestOrderErrors(t *testing.T) {
	tb := New(0)
	mustAdd(t, tb, 0, 1)
	for _, off := range []uint64{0, 2} {
		if err := tb.Add(off, 1); !errors.Is(err, ErrOrder) {
			t.Errorf("Add(%d) = %v, want ErrOrder", off, err)
		}
	}
	if err := tb.AddReady(0, 1); !errors.Is(err, ErrOrder) {
		t.Errorf("AddReady below the cursor = %v, want ErrOrder", err)
	}
	if err := tb.SetCursor(0); !errors.Is(err, ErrOrder) {
		t.Errorf("SetCursor below the cursor = %v, want ErrOrder", err)
	}
	mustCheck(t, tb)
}

// TestExpireOrder expires random deadlines in steps and checks that the
// ready-again list hands them out by offset.
func TestExpireOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tb := New(0)
	const n = 5000
	for off := range uint64(n) {
		mustAdd(t, tb, off, r.Int64N(1000))
	}
	total := 0
	for now := int64(0); now < 1000; now += 97 {
		total += tb.Expire(now)
		if d, ok := tb.NextDeadline(); ok && d <= now {
			t.Fatalf("deadline %d left in flight at %d", d, now)
		}
	}
	total += tb.Expire(1000)
	if total != n || tb.ReadyAgain() != n {
		t.Fatalf("expired %d, ready %d, want %d", total, tb.ReadyAgain(), n)
	}
	mustCheck(t, tb)
	for want := range uint64(n) {
		if off, _, _ := tb.PopReady(1); off != want {
			t.Fatalf("PopReady = %d, want %d", off, want)
		}
	}
}

// TestMostlyDoneMemory keeps the head stuck on one message while a million
// later ones are handed out and deleted: the table must hold about 24 bytes
// per 64 offsets, not a slot per offset.
func TestMostlyDoneMemory(t *testing.T) {
	const n = 1 << 20
	before := heapAlloc()
	tb := New(0)
	mustAdd(t, tb, 0, 1)
	for off := uint64(1); off < n; off++ {
		mustAdd(t, tb, off, 1)
		tb.Done(off)
	}
	used := int64(heapAlloc()) - int64(before)
	if tb.Head() != 0 || tb.Len() != 1 {
		t.Fatalf("head %d len %d, want 0 1", tb.Head(), tb.Len())
	}
	if limit := int64(n / chunkSize * 24 * 2); used > limit {
		t.Fatalf("%d bytes for %d mostly done offsets, want <= %d", used, n, limit)
	}
	t.Logf("%.3f bytes per mostly-done offset", float64(used)/n)
	runtime.KeepAlive(tb)
	tb.Done(0)
	if tb.Head() != n || tb.dir.n > 1 {
		t.Fatalf("head %d with %d chunks, want %d and at most 1", tb.Head(), tb.dir.n, n)
	}
}

// TestInFlightMemory holds the engine's target of 48 bytes per message in
// flight (BenchmarkMemory reports the figure).
func TestInFlightMemory(t *testing.T) {
	n := 1000000
	if raceEnabled {
		n = 100000
	}
	before := heapAlloc()
	tb := New(0)
	for off := range uint64(n) {
		mustAdd(t, tb, off, int64(off%1000))
	}
	per := float64(int64(heapAlloc())-int64(before)) / float64(n)
	runtime.KeepAlive(tb)
	if per > 48 {
		t.Fatalf("%.1f bytes per in-flight message, want <= 48", per)
	}
	t.Logf("%.1f bytes per in-flight message", per)
}

func TestSteadyStateAllocs(t *testing.T) {
	tb := New(0)
	const window = 1000
	for off := range uint64(window) {
		mustAdd(t, tb, off, int64(off))
	}
	cycle := func() {
		off := tb.Cursor()
		tb.Add(off, int64(off))
		tb.Expire(int64(off - window/2))
		if o, _, ok := tb.PopReady(int64(off + window)); ok {
			tb.Done(o)
		}
		tb.Done(off - window)
	}
	for range 10 * window {
		cycle()
	}
	if a := testing.AllocsPerRun(10000, cycle); a != 0 {
		t.Fatalf("%v allocations per cycle, want 0", a)
	}
	mustCheck(t, tb)
}

func TestStateString(t *testing.T) {
	for st, want := range map[State]string{
		StateUnknown: "unknown", StateInFlight: "in flight",
		StateReady: "ready", StateDone: "done", 9: "State(?)",
	} {
		if st.String() != want {
			t.Errorf("%d.String() = %q, want %q", st, st.String(), want)
		}
	}
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSkip: a range skipped at the cursor is done; with nothing live below
// the cursor it moves the head too, at once, however long the range.
func TestSkip(t *testing.T) {
	tb := New(100)
	if err := tb.Skip(1 << 60); err != nil || tb.Head() != 1<<60 || tb.Cursor() != 1<<60 {
		t.Fatalf("Skip over a huge range with nothing live: %v, head %d cursor %d", err, tb.Head(), tb.Cursor())
	}
	tb = New(0)
	if err := tb.Add(0, 5); err != nil {
		t.Fatal(err)
	}
	if err := tb.Skip(70); err != nil || tb.Cursor() != 70 || tb.Head() != 0 {
		t.Fatalf("Skip with one in flight: %v, head %d cursor %d", err, tb.Head(), tb.Cursor())
	}
	for off := uint64(1); off < 70; off++ {
		if st := tb.State(off); st != StateDone {
			t.Fatalf("offset %d skipped is %v", off, st)
		}
	}
	if _, err := tb.Done(0); err != nil || tb.Head() != 70 {
		t.Fatalf("after the live one is done: head %d, %v", tb.Head(), err)
	}
	if err := tb.Add(70, 9); err != nil {
		t.Fatal(err)
	}
}

// A skip over a huge range while a message below the cursor is live costs
// neither a step nor memory per skipped offset (a queue.head or a delete
// range that names offsets far past the log, kept by its checksums): the
// range is done, the head passes it at once when the live message is, and
// offsets after it are handed out as usual.
func TestSkipHugeRangeWithLiveBelowTakesNoMemoryPerOffset(t *testing.T) {
	tb := New(0)
	mustAdd(t, tb, 0, 5)
	before := totalAlloc()
	if err := tb.Skip(1 << 28); err != nil || tb.Cursor() != 1<<28 || tb.Head() != 0 {
		t.Fatalf("Skip with one in flight: %v, head %d cursor %d", err, tb.Head(), tb.Cursor())
	}
	if n := totalAlloc() - before; n > 1<<20 {
		t.Fatalf("Skip of 2^28 offsets allocated %d bytes", n)
	}
	mustCheck(t, tb)
	mustAdd(t, tb, 1<<28, 7)
	if err := tb.Skip(1 << 60); err != nil || tb.Cursor() != 1<<60 {
		t.Fatalf("second Skip: %v, cursor %d", err, tb.Cursor())
	}
	mustAdd(t, tb, 1<<60, 9)
	mustAdd(t, tb, 1<<60+1, 9)
	mustCheck(t, tb)
	for _, off := range []uint64{1, 63, 64, 1 << 20, 1<<28 - 1, 1<<28 + 1, 1 << 40, 1<<60 - 1} {
		if st := tb.State(off); st != StateDone {
			t.Fatalf("skipped offset %d is %v", off, st)
		}
	}
	for _, off := range []uint64{0, 1 << 28, 1 << 60, 1<<60 + 1} {
		if st := tb.State(off); st != StateInFlight {
			t.Fatalf("offset %d is %v, want in flight", off, st)
		}
	}
	if _, err := tb.Done(0); err != nil || tb.Head() != 1<<28 {
		t.Fatalf("after 0 is done: head %d, %v", tb.Head(), err)
	}
	mustCheck(t, tb)
	if _, err := tb.Done(1 << 28); err != nil || tb.Head() != 1<<60 {
		t.Fatalf("after 2^28 is done: head %d, %v", tb.Head(), err)
	}
	mustCheck(t, tb)
	if _, err := tb.Done(1<<60 + 1); err != nil || tb.Head() != 1<<60 {
		t.Fatalf("after 2^60+1 is done: head %d, %v", tb.Head(), err)
	}
	if _, err := tb.Done(1 << 60); err != nil || tb.Head() != 1<<60+2 || tb.Len() != 0 {
		t.Fatalf("after 2^60 is done: head %d len %d, %v", tb.Head(), tb.Len(), err)
	}
	mustCheck(t, tb)
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}
