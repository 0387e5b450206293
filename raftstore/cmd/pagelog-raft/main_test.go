package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/internal/httpserve"
	"github.com/pagelog/pagelog/queue"
)

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	peers := "n1=127.0.0.1:1,n2=127.0.0.1:2"
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--id, --dir and --peers are required"},
		{[]string{"--id", "n1", "--dir", dir}, "required"},
		{[]string{"--id", "n9", "--dir", dir, "--peers", peers}, "--id n9 is not in --peers"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", "n1=nohost"}, "--peers"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", "n1=127.0.0.1:1,n1=127.0.0.1:2"}, "given twice"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", "n1"}, "want ID=HOST:PORT"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", peers, "--max-body", "0"}, "--max-body"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", peers, "--visibility", "0s"}, "--visibility"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", peers, "--log-level", "loud"}, "--log-level"},
		{[]string{"--id", "n1", "--dir", dir, "--peers", peers, "extra"}, "unexpected argument"},
		{[]string{"--nosuchflag"}, "flag provided but not defined"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "POST /send") ||
		!strings.Contains(errb.String(), fmt.Sprintf("%.0fh", queue.MaxDelay.Hours())) {
		t.Errorf("--help: exit %d, %q; want the routes and queue.MaxDelay", code, errb.String())
	}
	// What a zero does to the HTTP server's timeouts and bound, one line each.
	help := errb.String()
	for _, flag := range []string{"read-timeout", "write-timeout", "idle-timeout", "max-conns"} {
		_, text, _ := strings.Cut(help, "  -"+flag+" ")
		text, _, _ = strings.Cut(text, "\n  -")
		want := "0 is the default, not no limit"
		if flag == "max-conns" {
			want = fmt.Sprintf("0 is %d, not no limit", httpserve.DefaultMaxConns)
		}
		if !strings.Contains(text, want) {
			t.Errorf("--help for --%s: %q; want %q", flag, text, want)
		}
	}
	// An HTTP address in use is an error before raft starts: nothing is
	// created in the node's directory.
	var e2 bytes.Buffer
	node := filepath.Join(dir, "node")
	if code := run(context.Background(), []string{"--id", "n1", "--dir", node, "--peers", peers, "--http", "256.0.0.1:1"}, &out, &e2); code != 1 || e2.Len() == 0 {
		t.Errorf("bad --http: exit %d, %q", code, e2.String())
	}
	if m, _ := filepath.Glob(filepath.Join(node, "*")); len(m) != 0 {
		t.Errorf("files made: %v", m)
	}
}
