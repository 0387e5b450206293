package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// serve keeps a read-only log open between scrapes: the scrapes that
// follow see what a writer appends meanwhile (offsets, segments, bytes),
// and records it drops from the front.
func TestServeFollowsWriter(t *testing.T) {
	dir := t.TempDir()
	logOf(t, dir, 10, 100, 512)
	url, _ := startServe(t, dir, "events")
	if _, _, body := get(t, "GET", url+"/metrics"); !strings.Contains(body, "pagelog_next_offset{log=\"events\"} 10\n") {
		t.Fatalf("first scrape:\n%s", body)
	}
	w, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 30 {
		if _, err := w.Append(bytes.Repeat([]byte("b"), 100)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, body := get(t, "GET", url+"/metrics")
	for _, want := range []string{
		"pagelog_next_offset{log=\"events\"} 40\n",
		"pagelog_segments{log=\"events\"} 10\n",
		"pagelog_log_bytes{log=\"events\"} 4640\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("a scrape after 30 appends does not say %q:\n%s", want, body)
		}
	}
	if _, err := w.DropBefore(20); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := w.Append(bytes.Repeat([]byte("b"), 100)); err != nil {
			t.Fatal(err)
		}
	}
	_, _, body = get(t, "GET", url+"/metrics")
	for _, want := range []string{
		"pagelog_first_offset{log=\"events\"} 20\n",
		"pagelog_next_offset{log=\"events\"} 50\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("a scrape after a drop below 20 and 10 appends does not say %q:\n%s", want, body)
		}
	}
}
