package main

import (
	"errors"
	"os"
)

// Windows is not supported yet: the library refuses to open a log there
// (engine.Supported), and so does every command. These keep the command
// building.

const oNoFollow = 0

var errWindows = errors.New("pagelog: Windows is not supported yet")

func mapShared(f *os.File, n int) ([]byte, error) { return nil, errWindows }
func unmap(b []byte) error                        { return errWindows }
func freeBytes(dir string) (int64, error)         { return 0, errWindows }
func isTerminalFile(f *os.File) bool              { return false }
func fileID(fi os.FileInfo) [2]uint64             { return [2]uint64{} }
func allocatedBytes(fi os.FileInfo) int64         { return fi.Size() }
func fdatasync(f *os.File) error                  { return f.Sync() }
