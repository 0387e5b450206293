package stopwatch

// tsc reads the CPU's time-stamp counter after an LFENCE, so that the read
// is not taken before the instructions ahead of it have finished.
func tsc() int64
