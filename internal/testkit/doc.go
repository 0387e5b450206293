// Package testkit holds the scaffolding the tests of several packages
// share, written once: readers of /proc (the mappings and descriptors a
// process holds on a directory's files), small platform calls (FIFOs,
// inode numbers, allocated blocks, kill -9 of oneself), fingerprints of a
// directory's files and their differences, the children a crash test
// starts from its own test binary and kills, and the torn files a power
// failure may leave.
//
// It is for tests only: no package's non-test code imports it (the import
// graph of deps_test.go says so). Functions that need /proc skip the test
// where it is missing.
package testkit
