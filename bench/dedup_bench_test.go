package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// BenchmarkDedupSend: a send of a 64-byte message with a deduplication id
// (send=dedup) against a plain send (send=plain), on a queue whose dedup
// window holds ids=N ids. Time is a ManualClock that moves by
// DedupWindow/N at each dedup send, so each one expires about one id and
// the window stays at N: the steady state of N sends per window. The
// default 5-minute window at about 3,300 sends a second holds a million.
// The ids are made per send (strconv); that is part of send=dedup's time,
// as is the clock's move. The head checkpoints are off: in real time they
// come once a CheckpointInterval, and on a clock moved by a step per send
// their fsync would land every few sends.
//
//	go test -run '^$' -bench 'Dedup' -count=10 ./bench/
func BenchmarkDedupSend(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, send := range []string{"plain", "dedup"} {
			b.Run(fmt.Sprintf("ids=%d/send=%s", n, send), func(b *testing.B) {
				f := dedupFixtureFor(b, n)
				body := make([]byte, 64)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				if send == "plain" {
					for range b.N {
						if _, err := f.q.Send(body); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				for range b.N {
					f.sendNext(b, body)
				}
				b.StopTimer()
				if got := f.q.Stats().DedupIDs; got < n-n/100 || got > n+n/100 {
					b.Fatalf("the window holds %d ids, want about %d", got, n)
				}
			})
		}
	}
}

// dedupFixture is a queue whose dedup window holds n ids, kept open across
// the sub-benchmarks of one size (a million ids take a while to send).
type dedupFixture struct {
	n     int
	dir   string
	q     *queue.Queue
	clock *queue.ManualClock
	step  time.Duration // DedupWindow / n
	next  int           // the next id
	buf   []byte
}

var dedupCur *dedupFixture

const dedupBenchWindow = 5 * time.Minute

// dedupFixtureFor returns the fixture of n ids, closing the one of another
// size.
func dedupFixtureFor(b *testing.B, n int) *dedupFixture {
	b.Helper()
	if dedupCur != nil && dedupCur.n == n {
		return dedupCur
	}
	if dedupCur != nil {
		_ = dedupCur.q.Close()
		_ = os.RemoveAll(dedupCur.dir)
		dedupCur = nil
	}
	f := &dedupFixture{n: n, dir: freshDir(b, "dedup-"), step: dedupBenchWindow / time.Duration(n)}
	f.clock = queue.NewManualClock(time.Unix(1_800_000_000, 0))
	q, err := queue.Open(f.dir, queue.Options{Clock: f.clock, DedupWindow: dedupBenchWindow, CheckpointInterval: 365 * 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	f.q = q
	body := make([]byte, 64)
	for range n {
		f.sendNext(b, body)
	}
	if got := q.Stats().DedupIDs; got < n-n/100 {
		b.Fatalf("the window holds %d ids after %d sends", got, n)
	}
	dedupCur = f
	return f
}

// sendNext sends body with a new id and moves the clock by one step.
func (f *dedupFixture) sendNext(b *testing.B, body []byte) {
	f.buf = strconv.AppendInt(append(f.buf[:0], "id-"...), int64(f.next), 10)
	f.next++
	if _, err := f.q.SendWith(body, queue.SendOptions{DedupID: string(f.buf)}); err != nil {
		b.Fatal(err)
	}
	f.clock.Advance(f.step)
}

// BenchmarkDedupTableLoad is the floor under send=dedup: one load from a
// random place of a table the size of the window's hash table at ids=N
// (16-byte slots, at most half full: 512 KiB, 4 MiB and 32 MiB), each
// load depending on the one before, as the lookup of a new id does on
// nothing the processor has fetched. A send with a new id makes at least
// one such load (its hash's slot; the window's other random load, the
// slot of the id that expires, is fetched beside it).
//
//	go test -run '^$' -bench 'Dedup' -count=10 ./bench/
func BenchmarkDedupTableLoad(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			slots := 16
			for slots < 2*n {
				slots *= 2
			}
			lines := slots * 16 / 64 // a cycle through every cache line, in random order
			next := make([]uint64, lines*8)
			perm := rand.Perm(lines)
			for i, l := range perm {
				next[l*8] = uint64(perm[(i+1)%lines] * 8)
			}
			p := uint64(0)
			b.ResetTimer()
			for range b.N {
				p = next[p]
			}
			dedupTableSink = p
		})
	}
}

var dedupTableSink uint64
