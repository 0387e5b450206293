package raftstore

// TestCrash kills a child process that runs a store the way a raft
// follower does (batches of entries, suffix deletes after a change of
// leader, prefix deletes after snapshots, a delete of everything and a
// restart at another index), with SIGKILL at random moments, most of them
// inside a DeleteRange. After each kill it checks two things:
//
//   - the process crash: the directory as the page cache left it opens,
//     and holds an allowed state (below);
//   - power failures during the DeleteRange that was running: the child
//     copied its directory just before the call (every byte of it was
//     synced: the store acknowledges nothing before its fsyncs), the kill
//     leaves the directory as the call left it, and a disk after a power
//     failure holds, file by file, the one or the other. raft.bounds is the
//     store's barrier: it is synced before the log is touched, and cleared
//     only after the log's Truncate synced everything, so the states are
//     both copies, and, when the kill found a change of raft.bounds, its
//     new version with every mix of the log's files (old or new, present
//     or not, each on its own: nothing is assumed of the order in which the
//     log's own operations reach the disk).
//
// An allowed state: every acknowledged entry below a cut is there with its
// term and data; a DeleteRange that did not return is all done or not done
// at all, never part; one that returned is done; entries of a StoreLogs
// that did not return may be there (a prefix of the batch); entries that a
// DeleteRange deleted, or a delete of everything, never come back; the
// stable store's term never goes back.
//
// go test -run TestCrash -crash.rounds=500 runs it long; -crash.seed=N
// replays a run.

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

var (
	crashRounds = flag.Int("crash.rounds", 25, "rounds of TestCrash (a child killed with SIGKILL each)")
	crashStates = flag.Int("crash.states", 12, "simulated power-failure states checked per kill inside a DeleteRange")
	crashSeed   = flag.Uint64("crash.seed", 0, "seed of TestCrash (0: from the clock)")
)

const (
	crashEnvDir  = "RAFTSTORE_CRASH_DIR"
	crashEnvSeed = "RAFTSTORE_CRASH_SEED"
	crashTermKey = "term"
)

func crashOptions() Options {
	return Options{Log: engine.Options{SegmentBytes: 4096, IndexIntervalBytes: 512, MaxRecordBytes: 4096}}
}

func crashMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// crashData is the data of the entry at idx written in term: a stale entry
// of another term at the same index is told apart.
func crashData(idx, term uint64) []byte {
	n := 20 + int(crashMix(idx*131+term)%1500)
	b := make([]byte, n)
	binary.BigEndian.PutUint64(b, idx)
	binary.BigEndian.PutUint64(b[8:], term)
	x := crashMix(idx ^ term<<32)
	for i := 16; i < n; i++ {
		if i%8 == 0 {
			x = crashMix(x)
		}
		b[i] = byte(x >> (8 * (i % 8)))
	}
	return b
}

// TestCrashChild is the child of TestCrash: it does nothing unless started
// by it. It prints each operation before it starts ("s", "d", "f", "a",
// "t") and once it returned (the same letter in upper case).
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		return
	}
	die := func(format string, args ...any) {
		fmt.Printf("E "+format+"\n", args...)
		os.Exit(2)
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashEnvSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 1))
	s, err := Open(dir, crashOptions())
	if err != nil {
		die("Open: %v", err)
	}
	term, err := s.GetUint64([]byte(crashTermKey))
	if err != nil && err != ErrKeyNotFound {
		die("GetUint64: %v", err)
	}
	newTerm := func() {
		term++
		fmt.Printf("t %d\n", term)
		if err := s.SetUint64([]byte(crashTermKey), term); err != nil {
			die("SetUint64: %v", err)
		}
		fmt.Printf("T %d\n", term)
	}
	newTerm()
	before := dir + ".before"
	snapshot := func() {
		_ = os.RemoveAll(before)
		_ = testkit.CopyDir(dir, before, true)
	}
	restartAt := uint64(0)
	for {
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		switch p := rng.IntN(100); {
		case p < 25 && last > first:
			min := first + 1 + rng.Uint64N(last-first)
			snapshot()
			fmt.Printf("d %d %d\n", min, last)
			if err := s.DeleteRange(min, last); err != nil {
				die("DeleteRange(%d, %d): %v", min, last, err)
			}
			fmt.Printf("D %d %d\n", min, last)
			newTerm()
		case p < 37 && last > first:
			max := first + rng.Uint64N(last-first)
			snapshot()
			fmt.Printf("f %d %d\n", first, max)
			if err := s.DeleteRange(first, max); err != nil {
				die("DeleteRange(%d, %d): %v", first, max, err)
			}
			fmt.Printf("F %d %d\n", first, max)
		case p < 40 && last > 0:
			fmt.Printf("a %d %d\n", first, last)
			if err := s.DeleteRange(first, last); err != nil {
				die("DeleteRange(%d, %d): %v", first, last, err)
			}
			fmt.Printf("A %d %d\n", first, last)
			// The next batch starts below or above the old entries.
			restartAt = 1 + rng.Uint64N(last+200)
		default:
			a := last + 1
			if last == 0 {
				a = max(restartAt, 1)
			}
			n := 1 + rng.IntN(16)
			batch := make([]*raft.Log, n)
			for i := range batch {
				idx := a + uint64(i)
				batch[i] = &raft.Log{Index: idx, Term: term, Data: crashData(idx, term)}
			}
			fmt.Printf("s %d %d %d\n", a, a+uint64(n)-1, term)
			if err := s.StoreLogs(batch); err != nil {
				die("StoreLogs(%d..): %v", a, err)
			}
			fmt.Printf("S %d %d %d\n", a, a+uint64(n)-1, term)
		}
	}
}

// crashModel is what the parent knows the store holds: entries [first,
// last] with their terms (first 0: empty), and the last term the stable
// store acknowledged.
type crashModel struct {
	first, last uint64
	terms       map[uint64]uint64
	term        uint64
}

func (m crashModel) clone() crashModel {
	c := m
	c.terms = make(map[uint64]uint64, len(m.terms))
	for k, v := range m.terms {
		c.terms[k] = v
	}
	return c
}

// crashOp is an operation the child started: its letter and numbers.
type crashOp struct {
	kind byte
	a, b uint64
	term uint64
}

func parseCrashOp(line string) (crashOp, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f[0]) != 1 {
		return crashOp{}, false
	}
	op := crashOp{kind: f[0][0]}
	nums := make([]uint64, len(f)-1)
	for i, s := range f[1:] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return crashOp{}, false
		}
		nums[i] = n
	}
	op.a = nums[0]
	if len(nums) > 1 {
		op.b = nums[1]
	}
	if len(nums) > 2 {
		op.term = nums[2]
	}
	return op, true
}

// apply updates the model with an acknowledged operation.
func (m *crashModel) apply(op crashOp) {
	switch op.kind {
	case 'S':
		if m.first == 0 {
			m.first = op.a
		}
		for i := op.a; i <= op.b; i++ {
			m.terms[i] = op.term
		}
		m.last = op.b
	case 'D':
		m.last = op.a - 1
	case 'F':
		m.first = op.b + 1
	case 'A':
		m.first, m.last = 0, 0
	case 'T':
		m.term = op.a
	}
	if m.first > m.last || m.first == 0 {
		m.first, m.last = 0, 0
	}
	for i := range m.terms {
		if i < m.first || i > m.last {
			delete(m.terms, i)
		}
	}
}

// crashCheck opens the store in dir and checks that it holds a state the
// model and the pending operation allow. It returns the model of what the
// store holds, and a description of what is wrong ("" when nothing).
func crashCheck(dir string, m crashModel, pending *crashOp) (crashModel, string) {
	s, err := Open(dir, crashOptions())
	if err != nil {
		return m, fmt.Sprintf("Open: %v", err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	got := fmt.Sprintf("[%d, %d]", first, last)
	allowed := [][2]uint64{{m.first, m.last}}
	newTerm := uint64(0)
	if pending != nil {
		switch op := *pending; op.kind {
		case 's':
			newTerm = op.term
			start := m.first
			if m.first == 0 {
				start = op.a
			}
			for l := op.a; l <= op.b; l++ {
				allowed = append(allowed, [2]uint64{start, l})
			}
		case 'd':
			allowed = append(allowed, [2]uint64{m.first, op.a - 1})
		case 'f':
			if op.b >= m.last {
				allowed = append(allowed, [2]uint64{0, 0})
			} else {
				allowed = append(allowed, [2]uint64{op.b + 1, m.last})
			}
		case 'a':
			allowed = append(allowed, [2]uint64{0, 0})
		}
	}
	ok := false
	for _, a := range allowed {
		ok = ok || a == [2]uint64{first, last}
	}
	if !ok {
		return m, fmt.Sprintf("the store holds %s; allowed %v (model [%d, %d], pending %+v)", got, allowed, m.first, m.last, pending)
	}
	out := crashModel{first: first, last: last, terms: map[uint64]uint64{}, term: m.term}
	var e raft.Log
	for idx := first; last > 0 && idx <= last; idx++ {
		want, known := m.terms[idx]
		if !known || pending != nil && pending.kind == 's' && idx >= pending.a && idx <= pending.b {
			want = newTerm
		}
		if err := s.GetLog(idx, &e); err != nil {
			return m, fmt.Sprintf("%s: GetLog(%d): %v", got, idx, err)
		}
		if e.Term != want || !bytes.Equal(e.Data, crashData(idx, want)) {
			return m, fmt.Sprintf("%s: entry %d has term %d and %d bytes, want term %d: a stale or damaged entry", got, idx, e.Term, len(e.Data), want)
		}
		out.terms[idx] = want
	}
	term, err := s.GetUint64([]byte(crashTermKey))
	if err != nil && m.term > 0 || term < m.term {
		return m, fmt.Sprintf("stable term %d (%v), acknowledged %d", term, err, m.term)
	}
	if pending != nil && pending.kind == 't' && term > pending.a {
		return m, fmt.Sprintf("stable term %d, pending %d", term, pending.a)
	}
	out.term = term
	return out, ""
}

type crashStats struct {
	kills, inDelete, inStore, states, cutsCompleted int
}

func TestCrash(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: -run '^TestCrash$' -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := filepath.Join(t.TempDir(), "store")
	scratch := crashScratch(t)
	m := crashModel{terms: map[uint64]uint64{}}
	var st crashStats
	for round := range *crashRounds {
		lines, pending := crashRunChild(t, dir, seed+uint64(round), rng)
		st.kills++
		for _, l := range lines {
			op, _ := parseCrashOp(l)
			if op.kind >= 'A' && op.kind <= 'Z' {
				m.apply(op)
			}
		}
		// The page cache's state, before anything opens it.
		current := filepath.Join(scratch, "current")
		_ = os.RemoveAll(current)
		_ = testkit.CopyDir(dir, current, true)
		prior := m.clone()
		var err string
		if m, err = crashCheck(dir, prior, pending); err != "" {
			t.Fatalf("round %d (seed %d), after the kill: %s\nlast lines: %q", round, seed, err, tail(lines, 6))
		}
		if pending == nil || (pending.kind != 'd' && pending.kind != 'f') {
			if pending != nil && pending.kind == 's' {
				st.inStore++
			}
			continue
		}
		st.inDelete++
		states := crashPowerStates(t, dir+".before", current, rng, *crashStates)
		for i, state := range states {
			sd := filepath.Join(scratch, "state")
			_ = os.RemoveAll(sd)
			state.build(t, sd)
			if _, err := crashCheck(sd, prior, pending); err != "" {
				t.Fatalf("round %d (seed %d), power failure inside %+v, state %d (%s): %s", round, seed, *pending, i, state, err)
			}
			st.states++
		}
		if pending.kind == 'd' && m.last == pending.a-1 && prior.last != m.last {
			st.cutsCompleted++
		}
	}
	t.Logf("%d kills: %d inside a DeleteRange (%d left the cut done), %d inside a StoreLogs; %d power-failure states checked",
		st.kills, st.inDelete, st.cutsCompleted, st.inStore, st.states)
	// Four kills in five aim at a DeleteRange (22 of 25 landed inside one
	// at a load of 11): none means the kills no longer reach the case.
	if st.inDelete == 0 || st.states == 0 {
		t.Fatalf("no kill came inside a DeleteRange (%d kills, %d power-failure states): the test no longer reaches its case", st.kills, st.states)
	}
}

func tail(lines []string, n int) []string { return lines[max(0, len(lines)-n):] }

// crashRunChild starts the child on dir, kills it inside one of its first
// few deletes (or, now and then, inside a StoreLogs), and returns its
// lines and the operation it had started and not finished.
func crashRunChild(t *testing.T, dir string, seed uint64, rng *rand.Rand) ([]string, *crashOp) {
	t.Helper()
	cmd := testkit.Child("TestCrashChild", crashEnvDir+"="+dir, crashEnvSeed+"="+strconv.FormatUint(seed, 10))
	out, stderr := testkit.StartChild(t, cmd)
	inStore := rng.IntN(5) == 0
	target := 1 + rng.IntN(4)
	delay := time.Duration(rng.IntN(6000)) * time.Microsecond
	if inStore {
		delay = time.Duration(rng.IntN(1500)) * time.Microsecond
	}
	lines := testkit.Lines(out, 256) // a line cut short by the kill says nothing
	var got []string
	var timer <-chan time.Time
	killed := false
	seen := 0
	hang := time.After(time.Minute)
	for open := true; open; {
		select {
		case line, ok := <-lines:
			if !ok {
				open = false
				break
			}
			got = append(got, line)
			if strings.HasPrefix(line, "E ") {
				t.Fatalf("child: %s\nstderr: %s", line, stderr.String())
			}
			k := line[0]
			trigger := k == 'd' || k == 'f'
			if inStore {
				trigger = k == 's'
			}
			if !killed && timer == nil && trigger {
				if seen++; seen >= target {
					timer = time.After(delay)
				}
			}
		case <-timer:
			timer = nil
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
		case <-hang:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			t.Fatalf("the child did not reach its kill in a minute; stderr:\n%s", stderr.String())
		}
	}
	if err := cmd.Wait(); !killed {
		t.Fatalf("the child exited by itself (%v); stderr:\n%s", err, stderr.String())
	}
	// The operation started and not acknowledged.
	var pending *crashOp
	for i := len(got) - 1; i >= 0; i-- {
		op, ok := parseCrashOp(got[i])
		if !ok {
			continue
		}
		if op.kind >= 'a' && op.kind <= 'z' {
			pending = &op
		}
		break
	}
	return got, pending
}

// crashState is one disk after a power failure: for each file, the
// version it holds (absent when its path maps to nil).
type crashState struct {
	files map[string][]byte
	desc  string
}

func (s crashState) String() string { return s.desc }

func (s crashState) build(t *testing.T, dir string) {
	t.Helper()
	for rel, b := range s.files {
		if b == nil {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, logDir), 0o700); err != nil {
		t.Fatal(err)
	}
}

// crashPowerStates returns the disks a power failure may leave between the
// synced copy before (taken before the DeleteRange) and the state current
// (when the process died): both whole, and, when raft.bounds changed, its
// new version with up to n mixes of the other files, each file old or new
// on its own.
func crashPowerStates(t *testing.T, before, current string, rng *rand.Rand, n int) []crashState {
	t.Helper()
	old, cur := crashReadTree(t, before), crashReadTree(t, current)
	states := []crashState{{old, "all before"}, {cur, "all as the process left them"}}
	if bytes.Equal(old[boundsName], cur[boundsName]) {
		if b, err := decodeBounds(cur[boundsName]); err != nil || b.cut == noCut {
			return states
		}
	}
	var changed []string
	for rel := range union(old, cur) {
		if rel == boundsName {
			continue
		}
		if !bytes.Equal(old[rel], cur[rel]) || (old[rel] == nil) != (cur[rel] == nil) {
			changed = append(changed, rel)
		}
	}
	for range n {
		files := map[string][]byte{}
		var picks []string
		for rel := range union(old, cur) {
			files[rel] = old[rel]
		}
		files[boundsName] = cur[boundsName]
		for _, rel := range changed {
			if rng.IntN(2) == 0 {
				files[rel] = cur[rel]
				picks = append(picks, rel)
			}
		}
		states = append(states, crashState{files, fmt.Sprintf("new %s; new: %v; old: the other %d changed files", boundsName, picks, len(changed)-len(picks))})
	}
	return states
}

func union(a, b map[string][]byte) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// crashReadTree returns every regular file below dir by relative path.
func crashReadTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if b == nil {
			b = []byte{}
		}
		out[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// crashScratch is where the simulated disks are built: a tmpfs when there
// is one (the fsyncs of Open cost nothing there).
func crashScratch(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "raftstore-crash-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}
