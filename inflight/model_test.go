package inflight

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("inflight.seed", 0, "replay TestModel with this seed only")
	seedsFlag = flag.Int("inflight.seeds", 25, "number of random seeds TestModel runs")
)

// mmsg is the model's record of one registered offset at or above head.
type mmsg struct {
	st       State
	deadline int64
	recv     int
}

// model is the obvious, slow implementation of a Table.
type model struct {
	head, cursor, hi uint64
	m                map[uint64]*mmsg
}

func newModel(head uint64) *model {
	return &model{head: head, cursor: head, hi: head, m: map[uint64]*mmsg{}}
}

func (m *model) state(off uint64) State {
	if off < m.head {
		return StateDone
	}
	if x := m.m[off]; x != nil {
		return x.st
	}
	return StateUnknown
}

func (m *model) advance() {
	for m.head < m.cursor && m.m[m.head].st == StateDone {
		delete(m.m, m.head)
		m.head++
	}
}

func (m *model) add(off uint64, deadline int64) error {
	if off != m.cursor || m.hi != m.cursor {
		return ErrOrder
	}
	m.m[off] = &mmsg{StateInFlight, deadline, 1}
	m.cursor++
	m.hi++
	return nil
}

func (m *model) expire(now int64) int {
	n := 0
	for _, x := range m.m {
		if x.st == StateInFlight && x.deadline <= now {
			x.st, x.deadline = StateReady, 0
			n++
		}
	}
	return n
}

func (m *model) popReady(deadline int64) (uint64, int, bool) {
	best, ok := uint64(0), false
	for off, x := range m.m {
		if x.st == StateReady && (!ok || off < best) {
			best, ok = off, true
		}
	}
	if !ok {
		return 0, 0, false
	}
	x := m.m[best]
	x.st, x.deadline = StateInFlight, deadline
	x.recv++
	return best, x.recv, true
}

func (m *model) done(off uint64) (State, error) {
	st := m.state(off)
	switch st {
	case StateUnknown:
		return st, ErrUnknown
	case StateDone:
		return st, nil
	}
	m.m[off] = &mmsg{st: StateDone}
	m.advance()
	return st, nil
}

func (m *model) markDone(off uint64) {
	if off < m.head {
		return
	}
	m.m[off] = &mmsg{st: StateDone}
	m.hi = max(m.hi, off+1)
	m.advance()
}

func (m *model) addReady(off uint64, recv int) error {
	if off < m.cursor || m.m[off] != nil {
		return ErrOrder
	}
	m.m[off] = &mmsg{st: StateReady, recv: recv}
	m.hi = max(m.hi, off+1)
	return nil
}

func (m *model) setCursor(c uint64) error {
	if c < m.hi {
		return ErrOrder
	}
	for off := m.cursor; off < c; off++ {
		if m.m[off] == nil {
			m.m[off] = &mmsg{st: StateReady}
		}
	}
	m.cursor, m.hi = c, c
	m.advance()
	return nil
}

func (m *model) skip(to uint64) error {
	if to <= m.cursor {
		return nil
	}
	if m.hi != m.cursor {
		return ErrOrder
	}
	for off := m.cursor; off < to; off++ {
		m.m[off] = &mmsg{st: StateDone}
	}
	m.cursor, m.hi = to, to
	m.advance()
	return nil
}

// summary returns the in-flight and ready counts and the earliest deadline.
func (m *model) summary() (in, ready int, d int64, ok bool) {
	for _, x := range m.m {
		switch x.st {
		case StateReady:
			ready++
		case StateInFlight:
			in++
			if !ok || x.deadline < d {
				d, ok = x.deadline, true
			}
		}
	}
	return in, ready, d, ok
}

// TestModel runs random operations on a Table and on the model and
// compares every result. A failure prints the seed; replay it with
// go test -run TestModel -inflight.seed=N ./inflight/
func TestModel(t *testing.T) {
	seeds := []uint64{*seedFlag}
	if *seedFlag == 0 {
		base := uint64(time.Now().UnixNano())
		seeds = seeds[:0]
		for i := range *seedsFlag {
			seeds = append(seeds, base+uint64(i))
		}
	}
	ops := 2500
	if testing.Short() || raceEnabled {
		ops = 600
	}
	for _, seed := range seeds {
		if err := runModel(seed, ops); err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test -run TestModel -inflight.seed=%d ./inflight/", seed, err, seed)
		}
	}
}

// sim is one model-based run.
type sim struct {
	r   *rand.Rand
	tb  *Table
	m   *model
	now int64
}

func runModel(seed uint64, ops int) error {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	head := r.Uint64N(1000)
	s := &sim{r: r, tb: New(head), m: newModel(head), now: 1000}
	if err := s.restore(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	for i := range ops {
		op, err := s.step()
		if err == nil {
			err = s.compare(i%50 == 0)
		}
		if err != nil {
			return fmt.Errorf("op %d (%s): %w", i, op, err)
		}
	}
	return nil
}

// restore registers a random past life, then sets the cursor.
func (s *sim) restore() error {
	span := s.r.Uint64N(400)
	for range s.r.IntN(int(span) + 1) {
		off := s.m.head + s.r.Uint64N(span+1)
		if s.r.IntN(4) == 0 {
			rc := s.r.IntN(5)
			if err := sameErr(s.tb.AddReady(off, rc), s.m.addReady(off, rc)); err != nil {
				return err
			}
			continue
		}
		s.tb.MarkDone(off)
		s.m.markDone(off)
	}
	c := s.m.hi + s.r.Uint64N(100)
	return sameErr(s.tb.SetCursor(c), s.m.setCursor(c))
}

// pick returns an offset near the live range.
func (s *sim) pick() uint64 {
	lo := s.m.head - min(s.m.head, 3)
	return lo + s.r.Uint64N(s.m.hi+4-lo)
}

// step performs one random operation on both and compares the results.
func (s *sim) step() (string, error) {
	tb, m, r := s.tb, s.m, s.r
	switch n := r.IntN(100); {
	case n < 30:
		off, d := m.cursor, s.now+r.Int64N(200)
		if r.IntN(20) == 0 {
			off += uint64(r.IntN(3)) - 1
		}
		return fmt.Sprintf("Add(%d, %d)", off, d), sameErr(tb.Add(off, d), m.add(off, d))
	case n < 60:
		off := s.pick()
		if r.IntN(2) == 0 { // near the head, to move it across chunks
			off = m.head + r.Uint64N(chunkSize+1)
		}
		st, err := tb.Done(off)
		wst, werr := m.done(off)
		if st != wst {
			return fmt.Sprintf("Done(%d)", off), fmt.Errorf("state %v, want %v", st, wst)
		}
		return fmt.Sprintf("Done(%d)", off), sameErr(err, werr)
	case n < 70:
		s.now += r.Int64N(60)
		got, want := tb.Expire(s.now), m.expire(s.now)
		return fmt.Sprintf("Expire(%d)", s.now), sameInt("expired", got, want)
	case n < 85:
		d := s.now + r.Int64N(200)
		off, rc, ok := tb.PopReady(d)
		woff, wrc, wok := m.popReady(d)
		if off != woff || rc != wrc || ok != wok {
			return "PopReady", fmt.Errorf("got %d %d %v, want %d %d %v", off, rc, ok, woff, wrc, wok)
		}
		return "PopReady", nil
	case n < 92:
		off := s.pick()
		return fmt.Sprintf("Get(%d)", off), s.compareGet(off)
	case n < 95:
		// Across whole chunks at times: a gap in the table's ring.
		to := m.cursor - min(m.cursor, 2) + r.Uint64N([]uint64{8, 70, 400}[r.IntN(3)])
		return fmt.Sprintf("Skip(%d)", to), sameErr(tb.Skip(to), m.skip(to))
	case n < 98:
		off := s.pick()
		tb.MarkDone(off)
		m.markDone(off)
		return fmt.Sprintf("MarkDone(%d)", off), nil
	case n < 99:
		off, rc := s.pick(), r.IntN(3)
		return fmt.Sprintf("AddReady(%d)", off), sameErr(tb.AddReady(off, rc), m.addReady(off, rc))
	default:
		c := m.hi - min(m.hi, uint64(r.IntN(10))) + uint64(r.IntN(150))
		return fmt.Sprintf("SetCursor(%d)", c), sameErr(tb.SetCursor(c), m.setCursor(c))
	}
}

// compare checks the summary figures and invariants; full also compares
// every offset near the live range.
func (s *sim) compare(full bool) error {
	tb, m := s.tb, s.m
	if err := tb.check(); err != nil {
		return err
	}
	if tb.Head() != m.head || tb.Cursor() != m.cursor {
		return fmt.Errorf("head %d cursor %d, want %d %d", tb.Head(), tb.Cursor(), m.head, m.cursor)
	}
	in, ready, wd, wok := m.summary()
	if tb.InFlight() != in || tb.ReadyAgain() != ready || tb.Len() != in+ready {
		return fmt.Errorf("in flight %d ready %d len %d, want %d %d", tb.InFlight(), tb.ReadyAgain(), tb.Len(), in, ready)
	}
	d, ok := tb.NextDeadline()
	if d != wd || ok != wok {
		return fmt.Errorf("NextDeadline %d %v, want %d %v", d, ok, wd, wok)
	}
	if !full {
		return nil
	}
	for off := m.head - min(m.head, 70); off < m.hi+70; off++ {
		if err := s.compareGet(off); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) compareGet(off uint64) error {
	st, wst := s.tb.State(off), s.m.state(off)
	if st != wst {
		return fmt.Errorf("State(%d) = %v, want %v", off, st, wst)
	}
	d, rc, in, ok := s.tb.Get(off)
	var wd int64
	var wrc int
	live := wst == StateInFlight || wst == StateReady
	if live {
		x := s.m.m[off]
		wd, wrc = x.deadline, x.recv
	}
	if d != wd || rc != wrc || in != (wst == StateInFlight) || ok != live {
		return fmt.Errorf("Get(%d) = %d %d %v %v, want %d %d %v %v", off, d, rc, in, ok, wd, wrc, wst == StateInFlight, live)
	}
	return nil
}

func sameErr(got, want error) error {
	if !errors.Is(got, want) || (got == nil) != (want == nil) {
		return fmt.Errorf("error %v, want %v", got, want)
	}
	return nil
}

func sameInt(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s %d, want %d", what, got, want)
	}
	return nil
}
