package queue

import (
	"math/rand/v2"
	"testing"
)

func TestSkipSetRandom(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := &skipSet{}
		ref := map[uint64]bool{}
		for range 200 {
			switch rng.IntN(4) {
			case 0, 1:
				a := rng.Uint64N(200)
				b := a + 1 + rng.Uint64N(5)
				s.add(a, b)
				for x := a; x < b; x++ {
					ref[x] = true
				}
			case 2:
				c := rng.Uint64N(200)
				s.trimFront(c)
				for x := range ref {
					if x < c {
						delete(ref, x)
					}
				}
			case 3:
				c := rng.Uint64N(220)
				s.trimFrom(c)
				for x := range ref {
					if x >= c {
						delete(ref, x)
					}
				}
			}
			for x := uint64(0); x < 220; x++ {
				if s.contains(x) != ref[x] {
					t.Fatalf("seed %d: contains(%d) = %v, want %v; set %v", seed, x, s.contains(x), ref[x], s.r)
				}
			}
			if s.count() != uint64(len(ref)) {
				t.Fatalf("seed %d: count %d want %d; %v", seed, s.count(), len(ref), s.r)
			}
			for i := 1; i < len(s.r); i++ {
				if s.r[i-1].to >= s.r[i].from || s.r[i].from >= s.r[i].to {
					t.Fatalf("seed %d: ranges not disjoint and sorted: %v", seed, s.r)
				}
			}
			a := rng.Uint64N(200)
			b := a + rng.Uint64N(30)
			var un uint64
			for _, r := range s.uncovered(a, b) {
				for x := r.from; x < r.to; x++ {
					if ref[x] {
						t.Fatalf("uncovered includes %d", x)
					}
					un++
				}
			}
			var want uint64
			for x := a; x < b; x++ {
				if !ref[x] {
					want++
				}
			}
			if un != want {
				t.Fatalf("seed %d: uncovered(%d,%d) has %d, want %d; %v", seed, a, b, un, want, s.r)
			}
		}
	}
}
