//go:build !amd64

package stopwatch

// tsc is a stand-in where there is no time-stamp counter to read:
// constantTSC reports false, so it is never called.
func tsc() int64 { return 0 }
