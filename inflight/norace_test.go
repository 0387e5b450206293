//go:build !race

package inflight

// raceEnabled shortens the randomized tests under the slow race detector.
const raceEnabled = false
