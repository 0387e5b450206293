package engine

// Shared pieces of the crash tests (crash_process_test.go,
// crash_power_test.go, crash_torn_test.go): flags, seeds, record contents
// and file helpers.
//
// The default sizes keep the three tests under a minute with -race on two
// cores. The long run:
//
//	go test ./engine -run Crash -crash.rounds=1000 -crash.power=10000
//
// Every test logs its seed at the start and again when it fails; replay a
// failure with -crash.seed=N (and -crash.case=K to run one power-loss case).

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

var (
	crashRounds = flag.Int("crash.rounds", 50, "rounds of TestCrashProcessKill (kill -9 of a child appending)")
	crashPower  = flag.Int("crash.power", 200, "cases of TestCrashPowerLoss (simulated power failures)")
	crashSeed   = flag.Uint64("crash.seed", 0, "seed of the crash tests (0: from the clock)")
	crashCase   = flag.Int("crash.case", -1, "run only this case of TestCrashPowerLoss (with -crash.seed)")
)

// crashSeedFor returns the test's seed, logs it, and arranges for it to be
// printed again if the test fails.
func crashSeedFor(t *testing.T) uint64 {
	t.Helper()
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: -run '^%s$' -crash.seed=%d)", seed, t.Name(), seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: replay with -run '^%s$' -crash.seed=%d", seed, t.Name(), seed)
		}
	})
	return seed
}

// crashMix is splitmix64's finalizer: a cheap, good 64-bit hash.
func crashMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// crashBodyLen is the body length of the record at off written with salt:
// minLen..maxLen bytes.
func crashBodyLen(off, salt uint64, minLen, maxLen int) int {
	return minLen + int(crashMix(off*31+salt)%uint64(maxLen-minLen+1))
}

// crashBody is the body of the record at off written with salt: its offset
// (8 bytes, when there is room), then pseudo-random bytes derived from off
// and salt. A writer that knows the offset before appending (the only
// writer: Next) can write it, and a checker can recompute it from the
// offset alone, so every record is checked byte for byte, and a stale
// record written with another salt at the same offset is told apart.
func crashBody(off, salt uint64, minLen, maxLen int) []byte {
	b := make([]byte, crashBodyLen(off, salt, minLen, maxLen))
	i := 0
	if len(b) >= 8 {
		binary.BigEndian.PutUint64(b, off)
		i = 8
	}
	x := crashMix(off ^ salt<<40 ^ 0x5bd1e995)
	for ; i < len(b); i++ {
		if i%8 == 0 {
			x = crashMix(x)
		}
		b[i] = byte(x >> (8 * (i % 8)))
	}
	return b
}

// quietCopyFiles copies l's files into dst (which exists) at a moment when
// no background work of l changes them (see whenQuiet). The caller makes no
// append, drop or Close meanwhile: the copy is the directory as it stands
// between two calls.
func quietCopyFiles(t testing.TB, l *Log, dst string) {
	t.Helper()
	if !whenQuiet(l, func() { testkit.MustCopyDir(t, l.dir, dst, false) }) {
		t.Fatal("the log's background work never went quiet")
	}
}

// whenQuiet runs do while no background work of l changes its files: it
// holds the roll state's lock while no segment is being prepared or removed
// (the preparer, and the prefaulter's settle, mark that under it) and no
// roll is naming index files. It reports false, without running do, when
// no such moment came within a minute.
func whenQuiet(l *Log, do func()) bool {
	deadline := time.Now().Add(time.Minute)
	for {
		l.rolls.mu.Lock()
		busy := l.rolls.preparing || l.rolls.activating
		if named := l.rolls.named; named != nil && !busy {
			select {
			case <-named:
			default:
				busy = true
			}
		}
		if !busy {
			defer l.rolls.mu.Unlock()
			do()
			return true
		}
		l.rolls.mu.Unlock()
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// crashRand returns a generator for one case of a test.
func crashRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// crashCheckRange reads every record in [from, to) and compares its body
// with want(offset). It returns a description of the first mismatch, or "".
func crashCheckRange(l *Log, from, to uint64, want func(uint64) []byte) string {
	for off := from; off < to; off++ {
		r, err := l.Read(off)
		if err != nil {
			return fmt.Sprintf("Read(%d) in [%d, %d): %v", off, from, to, err)
		}
		w := want(off)
		ok := string(r.Body) == string(w)
		n := len(r.Body)
		r.Release()
		if !ok {
			return fmt.Sprintf("Read(%d): a body of %d bytes that is not the one appended at that offset (%d bytes): stale or damaged record served",
				off, n, len(w))
		}
	}
	return ""
}

// crashScratchDir returns a temporary directory for the simulations, which
// need no real disk: under /dev/shm when there is one, so that the fsyncs
// the engine does itself (log.meta, log.clean, directories) cost nothing,
// else t.TempDir(). The process-kill test keeps the real file system.
func crashScratchDir(t testing.TB) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "pagelog-crash-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}
