// Package warmsearch is a binary search that looks in the warm, newest part
// of a sorted index first.
//
// Index files grow at the end and most lookups are for recent records, so the
// last WarmBytes of an index file are almost always in the page cache while
// its older pages may not be. A plain binary search starts in the middle of
// the file and touches about log2(n) cold pages on the way to a recent entry.
// Search instead probes the one entry just before the warm tail: when the
// answer lies in the tail it binary-searches the tail only, so a lookup of a
// recent entry never touches a page outside the last WarmBytes (plus the one
// boundary entry). Older targets cost one extra probe and then a normal
// binary search of the cold part.
//
// Search returns exactly what sort.Search returns for the same n and f.
//
// The package uses only the standard library, holds no state and allocates
// nothing; it is safe for concurrent use.
package warmsearch
