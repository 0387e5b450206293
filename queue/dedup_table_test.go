package queue

import (
	"math/rand/v2"
	"testing"
)

// TestHashTableAgreesWithAMap: random puts and deletes, with hashes drawn
// from a small range so that home slots collide and deletions shift long
// runs back, leave the table holding exactly what a map holds. (Hashes
// that differ only in the low bit are one key: see key.)
func TestHashTableAgreesWithAMap(t *testing.T) {
	for _, keys := range []uint64{8, 100, 5000} {
		rng := rand.New(rand.NewPCG(keys, 7))
		var tb hashTable
		model := map[uint64]uint64{}
		for i := range 100_000 {
			h := rng.Uint64N(keys) << rng.UintN(12) // many keys share low bits
			k := key(h)
			switch rng.IntN(4) {
			case 0, 1:
				tb.put(h, uint64(i))
				model[k] = uint64(i)
			case 2:
				tb.del(h)
				delete(model, k)
			default:
				v := model[k] + uint64(rng.IntN(2)) // the value held, or not
				tb.delIf(h, v)
				if w, ok := model[k]; ok && w == v {
					delete(model, k)
				}
			}
			if tb.len() != len(model) {
				t.Fatalf("keys %d, op %d: the table holds %d keys, the map %d", keys, i, tb.len(), len(model))
			}
			if i%997 == 0 {
				for k, v := range model {
					if got, ok := tb.get(k); !ok || got != v {
						t.Fatalf("keys %d, op %d: %#x -> %d, %v; want %d", keys, i, k, got, ok, v)
					}
				}
			}
		}
	}
}
