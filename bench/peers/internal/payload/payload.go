// Package payload makes the message bodies of the peer benchmarks.
package payload

import "math/rand/v2"

// Make returns size bytes of fixed pseudo-random data: incompressible, and
// the same for every system and every run.
func Make(size int) []byte {
	rng := rand.New(rand.NewPCG(7, uint64(size)))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
