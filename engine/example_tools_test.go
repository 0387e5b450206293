package engine_test

import (
	"fmt"
	"log"
	"path/filepath"

	"github.com/pagelog/pagelog/engine"
)

// A tool that must not create a log checks first.
func ExampleIsLog() {
	dir, remove := tempDir()
	defer remove()
	empty, _ := engine.IsLog(dir)
	l, err := engine.Open(filepath.Join(dir, "log"), engine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	l.Close()
	made, _ := engine.IsLog(filepath.Join(dir, "log"))
	fmt.Println(empty, made)
	// Output: false true
}

// A flag or a configuration file names the sync policy.
func ExampleParseSyncPolicy() {
	p, err := engine.ParseSyncPolicy("always")
	fmt.Println(p == engine.SyncAlways, err)
	_, err = engine.ParseSyncPolicy("sometimes")
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true
}

// A service that builds for every platform learns at start whether it can
// open a log here, rather than at its first Open.
func ExampleSupported() {
	if err := engine.Supported(); err != nil {
		fmt.Println("no log on this system:", err)
		return
	}
	fmt.Println("supported")
	// Output: supported
}
