//go:build race

package queue

// raceEnabled: the race detector is on (sync.Pool then drops a share of
// what is put back, at random).
const raceEnabled = true
