//go:build linux

package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/segment"
	"github.com/pagelog/pagelog/internal/testkit"
)

// TestCrashProcessKill kills a process that appends, with SIGKILL, at a
// random moment, and checks what the next Open finds. The writes go through
// a shared mapping, so whatever the child wrote is in the page cache and
// survives it: every acknowledged record must be there, and so must every
// record the child finished writing after its last acknowledgement; only a
// record being copied at the moment of the kill may be torn, and recovery
// must cut it. The rounds share one directory, so recovery runs again and
// again, across segment rolls, after SyncNone and SyncAlways writers alike.
//
// The kill moments are drawn from the seed; the exact interleaving is up to
// the scheduler, so a replay repeats the plan, not the timing.
func TestCrashProcessKill(t *testing.T) {
	seed := crashSeedFor(t)
	k := &crashKiller{t: t, seed: seed, rng: crashRand(seed, 0), dir: t.TempDir()}
	began := time.Now()
	for round := 0; round < *crashRounds; round++ {
		k.round(round)
	}
	st := k.st
	t.Logf("%d rounds in %v: %d acknowledged records verified, %d more written before the kill and kept; "+
		"%d torn tails seen (bytes past the recovered end), %d of them reported as a cut (%d bytes); "+
		"%d kills before Open finished, %d children done before the kill; %d segments, %d records",
		*crashRounds, time.Since(began).Round(time.Millisecond), st.acks, st.survivors, st.tornSeen, st.cuts, st.tornBytes,
		st.killedEarly, st.exited, st.segments, k.start)
}

// crashKiller runs the rounds of TestCrashProcessKill on one directory.
type crashKiller struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	dir     string
	writers []crashWriter // who wrote the records from which offset on
	start   uint64        // Next when the round's child starts
	st      crashKillStats
}

func (k *crashKiller) want(off uint64) []byte {
	return crashBody(off, crashSaltAt(k.writers, off), 8, 2008)
}

// round starts a child, kills it, reopens the log and checks it, appends
// one record and closes the log cleanly for the next round.
func (k *crashKiller) round(round int) {
	t := k.t
	policy := SyncNone
	if round%2 == 1 {
		policy = SyncAlways
	}
	salt := uint64(round)*2 + 1
	k.writers = append(k.writers, crashWriter{start: k.start, salt: salt})
	plan := crashPlanKill(k.rng, policy)
	res := crashRunChild(t, k.dir, policy, salt, plan)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("round %d (%s, kill %s, seed %d): %s\nchild stderr:\n%s",
			round, policy, plan, k.seed, fmt.Sprintf(format, args...), res.stderr)
	}
	if res.err != "" {
		fail("the child failed: %s", res.err)
	}
	if !res.beforeOpen && res.next != k.start {
		fail("the child opened the log at Next %d; the last clean Close left %d", res.next, k.start)
	}
	for i, off := range res.acks {
		if off != k.start+uint64(i) {
			fail("acknowledgement %d is offset %d, want %d", i, off, k.start+uint64(i))
		}
	}
	k.st.acks += len(res.acks)
	if res.exited {
		k.st.exited++
	}
	if res.beforeOpen {
		k.st.killedEarly++
	}

	newest, before := crashNewestLog(t, k.dir)
	l, err := Open(k.dir, crashKillOptions(policy))
	if err != nil {
		fail("Open after the kill: %v", err)
	}
	rec := l.Recovery()
	next := l.Next()
	switch {
	case next < k.start+uint64(len(res.acks)):
		fail("Next is %d after %d acknowledged appends from %d: acknowledged records lost (recovery %+v)",
			next, len(res.acks), k.start, rec.Active)
	case l.First() != 0:
		fail("First is %d, want 0", l.First())
	case len(rec.Active.Damaged) > 0:
		fail("recovery reports damage after a process kill: %+v", rec.Active.Damaged)
	}
	from := min(k.start, crashSecondNewestBase(l))
	if round%100 == 99 || round == *crashRounds-1 {
		from = 0
	}
	if msg := crashCheckRange(l, from, next, k.want); msg != "" {
		fail("%s (recovery %+v)", msg, rec.Active)
	}
	if rec.Active.Segment == newest && rec.Active.End < int64(len(before)) && !testkit.AllZero(before[rec.Active.End:]) {
		k.st.tornSeen++
	}
	if rec.Active.Cut {
		k.st.cuts++
		k.st.tornBytes += rec.Active.TornBytes
	}
	k.st.survivors += int(next - k.start - uint64(len(res.acks)))
	k.st.segments = rec.Segments

	// Appends go on at Next, and nothing but zeros follows the new end.
	k.writers = append(k.writers, crashWriter{start: next, salt: salt + 1})
	off, err := l.Append(k.want(next))
	if err != nil || off != next {
		fail("Append after recovery: offset %d, %v; want %d", off, err, next)
	}
	if msg := crashCheckRange(l, off, off+1, k.want); msg != "" {
		fail("reading back the append after recovery: %s", msg)
	}
	end := l.active.End()
	path := l.active.Path()
	if err := l.Close(); err != nil {
		fail("Close: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || !testkit.AllZero(b[min(end, int64(len(b))):]) {
		fail("bytes past the end (%d) of %s are not all zero after recovery and an append (%v)", end, path, err)
	}
	k.start = next + 1
}

// crashNewestLog returns the name and content of the newest segment file.
func crashNewestLog(t testing.TB, dir string) (string, []byte) {
	t.Helper()
	bases, err := listSegments(dir)
	if err != nil || len(bases) == 0 {
		return "", nil
	}
	name := segment.Name(bases[len(bases)-1], segment.LogSuffix)
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return name, b
}

type crashKillStats struct {
	acks, survivors, tornSeen, cuts, killedEarly, exited, segments int
	tornBytes                                                      int64
}

// crashWriter: the records from offset start on were written with salt
// (until the next writer's start).
type crashWriter struct{ start, salt uint64 }

// crashSaltAt returns the salt of the last writer that started at or below
// off: the one whose record at off is the current one.
func crashSaltAt(ws []crashWriter, off uint64) uint64 {
	for i := len(ws) - 1; i >= 0; i-- {
		if ws[i].start <= off {
			return ws[i].salt
		}
	}
	return 0
}

// crashSecondNewestBase is the base offset of the segment before the active
// one (0 when there is none): recovery touches only those two.
func crashSecondNewestBase(l *Log) uint64 {
	segs := *l.segs.Load()
	if len(segs) < 2 {
		return 0
	}
	return segs[len(segs)-2].Base()
}

func crashKillOptions(p SyncPolicy) Options {
	return Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 2048, MaxRecordBytes: 4096, Sync: p}
}

// The child's settings, passed in its environment.
const (
	crashEnvDir  = "PAGELOG_CRASH_DIR"
	crashEnvSync = "PAGELOG_CRASH_SYNC"
	crashEnvSalt = "PAGELOG_CRASH_SALT"
	crashEnvMax  = "PAGELOG_CRASH_MAX"
	crashEnvPipe = "PAGELOG_CRASH_PIPELINED"
)

// crashKillPlan says when the parent kills the child.
type crashKillPlan struct {
	afterAcks int           // kill after this many acknowledgements (-1: by time)
	delay     time.Duration // or this long after the child opened the log
	fromStart bool          // the delay counts from the child's start instead
	maxAcks   int           // the child stops appending after this many
	pipelined bool          // the child prints from a second goroutine
}

func (p crashKillPlan) String() string {
	var s string
	switch {
	case p.afterAcks >= 0:
		s = fmt.Sprintf("after %d acks", p.afterAcks)
	case p.fromStart:
		s = fmt.Sprintf("%v after start", p.delay)
	default:
		s = fmt.Sprintf("%v after open", p.delay)
	}
	if p.pipelined {
		s += ", pipelined"
	}
	return s
}

func crashPlanKill(rng *rand.Rand, policy SyncPolicy) crashKillPlan {
	p := crashKillPlan{afterAcks: -1, maxAcks: 400, pipelined: rng.IntN(2) == 0}
	if policy == SyncAlways {
		p.maxAcks = 64 // an fdatasync each
	}
	switch rng.IntN(4) {
	case 0, 1:
		p.afterAcks = rng.IntN(p.maxAcks + 1)
	case 2:
		p.delay = time.Duration(rng.IntN(3000)) * time.Microsecond
	default:
		p.fromStart = true
		p.delay = time.Duration(rng.IntN(150_000)) * time.Microsecond
	}
	return p
}

// crashChildResult is what the parent saw of one child.
type crashChildResult struct {
	acks       []uint64
	next       uint64 // Next when the child had opened the log
	beforeOpen bool   // killed before it reported the open
	exited     bool   // it ended before the kill
	err        string // an error the child reported
	stderr     string
}

// crashRunChild starts a child appending to dir, kills it as planned and
// collects what it acknowledged.
func crashRunChild(t *testing.T, dir string, policy SyncPolicy, salt uint64, plan crashKillPlan) crashChildResult {
	t.Helper()
	cmd := testkit.Child("TestCrashChild")
	cmd.Env = append(os.Environ(),
		crashEnvDir+"="+dir,
		crashEnvSync+"="+policy.String(),
		crashEnvSalt+"="+strconv.FormatUint(salt, 10),
		crashEnvMax+"="+strconv.Itoa(plan.maxAcks),
	)
	if plan.pipelined {
		cmd.Env = append(cmd.Env, crashEnvPipe+"=1")
	}
	out, stderr := testkit.StartChild(t, cmd)
	lines := testkit.Lines(out, 64) // a line cut short by the kill is no acknowledgement
	res := crashChildResult{beforeOpen: true}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	var timer <-chan time.Time
	if plan.fromStart {
		timer = time.After(plan.delay)
	}
	hang := time.After(2 * time.Minute)
	for open := true; open; {
		select {
		case line, ok := <-lines:
			if !ok {
				open = false
				break
			}
			crashParseLine(line, &res)
			switch {
			case killed:
			case strings.HasPrefix(line, "O ") && plan.afterAcks == 0:
				kill()
			case strings.HasPrefix(line, "O ") && plan.afterAcks < 0 && !plan.fromStart:
				timer = time.After(plan.delay)
			case strings.HasPrefix(line, "A ") && plan.afterAcks > 0 && len(res.acks) >= plan.afterAcks:
				kill()
			}
		case <-timer:
			timer = nil
			kill()
		case <-hang:
			kill()
			t.Fatalf("the child did not get to the kill point (%s) in 2 minutes; stderr:\n%s", plan, stderr.String())
		}
	}
	err := cmd.Wait()
	res.exited = !killed
	res.stderr = stderr.String()
	if !killed && err != nil && res.err == "" {
		res.err = fmt.Sprintf("exit: %v", err)
	}
	return res
}

func crashParseLine(line string, res *crashChildResult) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return
	}
	switch f[0] {
	case "A":
		if off, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			res.acks = append(res.acks, off)
		}
	case "O":
		if next, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			res.next, res.beforeOpen = next, false
		}
	case "E":
		res.err = line
	}
}

// TestCrashChild is the child of TestCrashProcessKill: it does nothing
// unless started by it. It opens the log, prints "O <next>", then appends
// records derived from their offsets and prints "A <offset>" for each one
// acknowledged, straight to the file descriptor, until it is killed. After
// the planned number of appends it waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		return
	}
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stdout, "E "+format+"\n", args...)
		os.Exit(2)
	}
	policy, err := ParseSyncPolicy(os.Getenv(crashEnvSync))
	if err != nil {
		die("%v", err)
	}
	salt, err := strconv.ParseUint(os.Getenv(crashEnvSalt), 10, 64)
	if err != nil {
		die("salt: %v", err)
	}
	maxAcks, err := strconv.Atoi(os.Getenv(crashEnvMax))
	if err != nil {
		die("max: %v", err)
	}
	l, err := Open(dir, crashKillOptions(policy))
	if err != nil {
		die("Open: %v", err)
	}
	fmt.Fprintf(os.Stdout, "O %d\n", l.Next())
	appendOne := func() uint64 {
		want := l.Next()
		off, err := l.Append(crashBody(want, salt, 8, 2008))
		if err != nil || off != want {
			die("Append: offset %d, %v; want %d", off, err, want)
		}
		return off
	}
	if os.Getenv(crashEnvPipe) == "" {
		for range maxAcks {
			fmt.Fprintf(os.Stdout, "A %d\n", appendOne())
		}
	} else {
		// Pipelined: a second goroutine prints the acknowledgements, so
		// that the appender runs back to back and a kill is likely to
		// land inside a record's copy.
		acks := make(chan uint64, 16)
		done := make(chan struct{})
		go func() {
			for off := range acks {
				fmt.Fprintf(os.Stdout, "A %d\n", off)
			}
			close(done)
		}()
		for range maxAcks {
			acks <- appendOne()
		}
		close(acks)
		<-done
	}
	// Wait for the kill; a parent that went away kills us (Pdeathsig).
	time.Sleep(2 * time.Minute)
	die("not killed")
}
