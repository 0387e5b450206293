package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/httpserve"
)

// startServe serves dir's metrics on a loopback port until the test ends;
// it returns the base URL.
func startServe(t *testing.T, dir, name string) (string, *syncBuffer) {
	t.Helper()
	return startServeWith(t, httpserve.Options{}, dir, name)
}

// startServeWith is startServe with the server's options o.
func startServeWith(t *testing.T, o httpserve.Options, dir, name string) (string, *syncBuffer) {
	t.Helper()
	setup, err := httpserve.Load(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var errLog syncBuffer
	done := make(chan error, 1)
	go func() { done <- serveMetrics(ctx, setup, ln, dir, name, &errLog) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveMetrics: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), &errLog
}

func get(t *testing.T, method, url string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestServeLog(t *testing.T) {
	dir := t.TempDir()
	logOf(t, dir, 10, 100, 512)
	url, _ := startServe(t, dir, "events")
	code, h, body := get(t, "GET", url+"/metrics")
	if code != 200 || h.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("GET /metrics: %d %v\n%s", code, h, body)
	}
	want := `# HELP pagelog_first_offset Oldest offset the log holds.
# TYPE pagelog_first_offset gauge
pagelog_first_offset{log="events"} 0
# HELP pagelog_next_offset Offset the next append gets.
# TYPE pagelog_next_offset gauge
pagelog_next_offset{log="events"} 10
# HELP pagelog_segments Segment files in the log.
# TYPE pagelog_segments gauge
pagelog_segments{log="events"} 3
# HELP pagelog_log_bytes Bytes of records in the log's segments.
# TYPE pagelog_log_bytes gauge
pagelog_log_bytes{log="events"} 1160
# HELP pagelog_disk_bytes `
	if !strings.HasPrefix(body, want) {
		t.Errorf("exposition:\n%s\nwant it to start with:\n%s", body, want)
	}
	if strings.Contains(body, "pagelog_queue_") {
		t.Errorf("a log's exposition has queue metrics:\n%s", body)
	}
	if code, _, body := get(t, "HEAD", url+"/metrics"); code != 200 || body != "" {
		t.Errorf("HEAD /metrics: %d %q", code, body)
	}
	if code, _, _ := get(t, "POST", url+"/metrics"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", code)
	}
	if code, _, _ := get(t, "GET", url+"/"); code != http.StatusNotFound {
		t.Errorf("GET /: %d", code)
	}
}

func TestServeQueue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, strings.Repeat(strings.Repeat("m", 1000)+"\n", 10), "queue", "send", "--dir", dir)
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "0")
	url, _ := startServe(t, dir, "jobs")
	_, _, body := get(t, "GET", url+"/metrics")
	for _, want := range []string{
		"\npagelog_next_offset{log=\"jobs\"} 10\n",
		"\npagelog_queue_depth{queue=\"jobs\"} 9\n",
		"\npagelog_queue_head_offset{queue=\"jobs\"} 1\n",
		"\npagelog_queue_end_offset{queue=\"jobs\"} 10\n",
		"\npagelog_queue_dead_letters{queue=\"jobs\"} 0\n",
		"\npagelog_queue_lost_messages{queue=\"jobs\"} 0\n",
		"\n# TYPE pagelog_queue_oldest_message_age_seconds gauge\npagelog_queue_oldest_message_age_seconds{queue=\"jobs\"} ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q:\n%s", want, body)
		}
	}
}

// Label values and help text are escaped as the text format says.
func TestServeEscapes(t *testing.T) {
	dir := t.TempDir()
	logOf(t, dir, 1, 1, 0)
	url, _ := startServe(t, dir, "a\"b\\c\nd")
	_, _, body := get(t, "GET", url+"/metrics")
	if !strings.Contains(body, "\npagelog_next_offset{log=\"a\\\"b\\\\c\\nd\"} 1\n") {
		t.Errorf("label not escaped:\n%s", body)
	}
	if got := escapeHelp("a\\b\nc\"d"); got != `a\\b\nc"d` {
		t.Errorf("escapeHelp: %q", got)
	}
}

// A scrape that cannot read the directory fails with 500 and the reason,
// and the server goes on: the next scrape after the directory is back works.
func TestServeError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	logOf(t, dir, 2, 1, 0)
	url, errLog := startServe(t, dir, "events")
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	code, _, body := get(t, "GET", url+"/metrics")
	if code != http.StatusInternalServerError || !strings.HasPrefix(body, "pagelog serve: ") {
		t.Errorf("scrape of a missing directory: %d %q", code, body)
	}
	if !strings.Contains(errLog.String(), "pagelog serve: ") {
		t.Errorf("the failure was not logged: %q", errLog.String())
	}
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	if code, _, body := get(t, "GET", url+"/metrics"); code != 200 || !strings.Contains(body, "pagelog_next_offset{log=\"events\"} 2\n") {
		t.Errorf("scrape after the directory came back: %d\n%s", code, body)
	}
}

func TestServeArguments(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	logOf(t, logDir, 1, 1, 0)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve"}, 2, "missing --dir"},
		{[]string{"serve", "--dir", logDir, "--name", "\xff"}, 2, "not UTF-8"},
		{[]string{"serve", "--dir", dir}, 1, "no log"},
		{[]string{"serve", "--dir", filepath.Join(dir, "missing")}, 1, "no log"},
		{[]string{"serve", "--dir", logDir, "--listen", busy.Addr().String()}, 1, "address already in use"},
		{[]string{"serve", "--dir", logDir, "--listen", "not an address"}, 1, "pagelog serve: "},
	} {
		r := runCmd(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
}

// The whole command: it prints where it listens and stops on SIGTERM with
// status 0 (run as a child process, as an operator runs it).
func TestServeCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	logOf(t, dir, 4, 1, 0)
	cmd := exec.Command(pagelogBinary(t), "serve", "--dir", dir, "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line := readLineTimeout(t, bufio.NewReader(stdout), 10*time.Second)
	url, ok := strings.CutPrefix(line, "serving ")
	url, _, _ = strings.Cut(url, " ")
	if !ok || !strings.HasSuffix(url, "/metrics") || !strings.HasSuffix(line, " for "+dir+"\n") {
		t.Fatalf("first line %q", line)
	}
	if code, _, body := get(t, "GET", url); code != 200 || !strings.Contains(body, "pagelog_next_offset{log=\"log\"} 4\n") {
		t.Errorf("GET %s: %d\n%s", url, code, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v; stderr %q", err, stderr.String())
	}
}

// serve listens on the loopback interface unless told otherwise.
func TestServeListensOnLoopbackByDefault(t *testing.T) {
	r := runCmd(t, "", "serve", "--help")
	if r.code != 0 || !strings.Contains(r.stderr, "(default 127.0.0.1:8080)") {
		t.Fatalf("serve --help: exit %d, want the default --listen 127.0.0.1:8080:\n%s", r.code, r.stderr)
	}
}

// With --token-file, a scrape without the token is refused with 401.
func TestServeTokenGuardsMetrics(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	logOf(t, logDir, 1, 1, 0)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("scrape-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, _ := startServeWith(t, httpserve.Options{TokenFile: tokenFile}, logDir, "log")
	if code, h, _ := get(t, "GET", url+"/metrics"); code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Errorf("scrape without the token: %d %v, want 401 with WWW-Authenticate", code, h)
	}
	req, err := http.NewRequest("GET", url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer scrape-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("scrape with the token: %d", resp.StatusCode)
	}
	if r := runCmd(t, "", "serve", "--dir", logDir, "--listen", "127.0.0.1:0", "--token-file", filepath.Join(dir, "missing")); r.code != 2 ||
		!strings.Contains(r.stderr, "--token-file") {
		t.Errorf("serve with a missing --token-file: exit %d, %q", r.code, r.stderr)
	}
}
