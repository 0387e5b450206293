package bench

import (
	"fmt"
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
