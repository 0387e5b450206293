package rqueue

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// oneNode starts a single-node cluster and serves its API.
func oneNode(t *testing.T) (*Node, *httptest.Server) {
	t.Helper()
	_, tr := raft.NewInmemTransport("solo")
	qo := queue.Options{Visibility: time.Minute}
	qo.Log.MaxRecordBytes = 1024
	n, err := Start(Config{
		ID: "solo", Dir: filepath.Join(t.TempDir(), "solo"), Transport: tr, Bootstrap: true,
		Queue: qo, Raft: testRaft, NoSync: true, LogOutput: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := n.Close(); err != nil && err != ErrClosed {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for n.leading() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return n, srv
}

func call(t *testing.T, srv *httptest.Server, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusMethodNotAllowed {
		var e apiError
		if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
			t.Fatalf("%s %s: %d without a JSON error: %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

func TestHTTPAPI(t *testing.T) {
	n, srv := oneNode(t)
	var ids struct{ IDs []uint64 }
	if c := call(t, srv, "POST", "/send", `{"body":"hello"}`, &ids); c != 200 || len(ids.IDs) != 1 || ids.IDs[0] != 1 {
		t.Fatalf("send: %d %v", c, ids)
	}
	bin := []byte{0xff, 0, 1}
	req := `{"messages":[{"body64":"` + base64.StdEncoding.EncodeToString(bin) + `"},{"body":"later","delay":"1h"},{"body":"g","group":"grp"}]}`
	if c := call(t, srv, "POST", "/send", req, &ids); c != 200 || len(ids.IDs) != 3 || ids.IDs[0] != 2 || ids.IDs[2] != 4 {
		t.Fatalf("send batch: %d %v", c, ids)
	}
	for _, bad := range []string{`{}`, `{"body":"a","body64":"YQ=="}`, `{"body64":"!!"}`, `{"body":"a","delay":"-1s"}`,
		`{"body":"a","delay":"soon"}`, `{"body":"a","extra":1}`, `{"body":"a","messages":[{"body":"b"}]}`, `not json`,
		`{"body":"a","group":"` + strings.Repeat("g", 129) + `"}`} {
		if c := call(t, srv, "POST", "/send", bad, nil); c != 400 {
			t.Fatalf("send %s: %d, want 400", bad, c)
		}
	}
	if c := call(t, srv, "POST", "/send", `{"body":"`+strings.Repeat("b", 1025)+`"}`, nil); c != 413 {
		t.Fatalf("too large: %d", c)
	}
	got := map[uint64]received{}
	for range 3 {
		var m received
		if c := call(t, srv, "POST", "/receive?wait=1s", "", &m); c != 200 {
			t.Fatalf("receive: %d", c)
		}
		got[m.ID] = m
	}
	if *got[1].Body != "hello" || got[2].Body != nil || *got[2].Body64 != base64.StdEncoding.EncodeToString(bin) ||
		*got[4].Body != "g" || got[4].Group != "grp" || got[1].Receives != 1 || time.Until(got[1].Deadline) < 50*time.Second {
		t.Fatalf("received %+v", got)
	}
	if c := call(t, srv, "POST", "/receive?wait=50ms", "", nil); c != 204 {
		t.Fatalf("nothing ready: %d, want 204", c)
	}
	if c := call(t, srv, "POST", "/receive?wait=forever", "", nil); c != 400 {
		t.Fatalf("bad wait: %d", c)
	}
	if c := call(t, srv, "POST", "/visibility", `{"id":1,"timeout":"0s"}`, nil); c != 200 {
		t.Fatalf("visibility: %d", c)
	}
	if c := call(t, srv, "POST", "/visibility", `{"id":99,"timeout":"0s"}`, nil); c != 404 {
		t.Fatalf("visibility of nothing: %d", c)
	}
	var m received
	if c := call(t, srv, "POST", "/receive", "", &m); c != 200 || m.ID != 1 || m.Receives != 2 {
		t.Fatalf("released message: %d %+v", c, m)
	}
	var del struct{ Deleted int }
	if c := call(t, srv, "POST", "/delete", `{"ids":[1,2,2,77]}`, &del); c != 200 || del.Deleted != 2 {
		t.Fatalf("delete: %d %+v", c, del)
	}
	if c := call(t, srv, "POST", "/delete", `{"ids":[]}`, nil); c != 400 {
		t.Fatalf("empty delete: %d", c)
	}
	var st NodeStatus
	if c := call(t, srv, "GET", "/status", "", &st); c != 200 || st.State != "Leader" || !st.Ready || st.Messages != 2 || st.NextID != 5 {
		t.Fatalf("status: %d %+v", c, st)
	}
	var d Digest
	if c := call(t, srv, "GET", "/digest", "", &d); c != 200 || d.Messages != 2 || len(d.SHA256) != 64 {
		t.Fatalf("digest: %d %+v", c, d)
	}
	if c := call(t, srv, "GET", "/send", "", nil); c != http.StatusMethodNotAllowed {
		t.Fatalf("GET /send: %d", c)
	}
	// A closed node answers 503, with a JSON error.
	srv2 := httptest.NewServer(n.Handler())
	defer srv2.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if c := call(t, srv2, "POST", "/send", `{"body":"x"}`, nil); c != 503 {
		t.Fatalf("send after close: %d", c)
	}
	if err := n.Close(); err != ErrClosed {
		t.Fatalf("second close: %v", err)
	}
}

// A request body holds one JSON value: anything after it but white space
// is refused with 400, and nothing of it is done.
func TestHTTPRejectsTrailingData(t *testing.T) {
	n, srv := oneNode(t)
	var ids struct{ IDs []uint64 }
	if c := call(t, srv, "POST", "/send", `{"body":"kept"}`+"\n \t", &ids); c != 200 || len(ids.IDs) != 1 {
		t.Fatalf("send with trailing white space: %d %v", c, ids)
	}
	for _, c := range []struct{ path, body string }{
		{"/send", `{"body":"x"}{"body":"y"}`},
		{"/send", `{"body":"x"} y`},
		{"/send", `{"messages":[{"body":"x"}]}[]`},
		{"/delete", `{"ids":[1]}{"ids":[2]}`},
		{"/delete", `{"ids":[1]} 2`},
		{"/visibility", `{"id":1,"timeout":"0s"}{}`},
	} {
		if code := call(t, srv, "POST", c.path, c.body, nil); code != 400 {
			t.Errorf("POST %s %s: %d, want 400", c.path, c.body, code)
		}
	}
	if st := n.Status(); st.Messages != 1 || st.NextID != 2 {
		t.Errorf("after the refused requests: %d messages, next id %d; want 1 and 2", st.Messages, st.NextID)
	}
}

// Client errors answer 4xx, never 500: a delay beyond queue.MaxDelay is a
// bad request, and a request body over the limit is 413 whatever its size.
func TestHTTPClientErrorCodes(t *testing.T) {
	n, srv := oneNode(t)
	for _, c := range []struct {
		name, path, body string
		want             int
	}{
		{"delay over MaxDelay", "/send", `{"body":"a","delay":"` + (queue.MaxDelay + time.Hour).String() + `"}`, 400},
		{"delay over MaxDelay in a batch", "/send", `{"messages":[{"body":"a"},{"body":"b","delay":"9000h"}]}`, 400},
		{"body one byte over the message limit", "/send", `{"body":"` + strings.Repeat("b", 1025) + `"}`, 413},
		{"request of 5 MiB", "/send", `{"body":"` + strings.Repeat("b", 5<<20) + `"}`, 413},
		{"delete of 5 MiB", "/delete", `{"ids":[` + strings.Repeat("1,", 5<<19) + `1]}`, 413},
		{"visibility over the maximum", "/visibility", `{"id":1,"timeout":"` + (queue.MaxVisibility + time.Hour).String() + `"}`, 400},
		{"negative visibility", "/visibility", `{"id":1,"timeout":"-1s"}`, 400},
	} {
		if code := call(t, srv, "POST", c.path, c.body, nil); code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
		}
	}
	if _, err := n.Send(context.Background(), []Outgoing{{Body: []byte("a"), Due: time.Now().Add(2 * queue.MaxDelay).UnixMilli()}}); !errors.Is(err, engine.ErrBadOptions) {
		t.Errorf("Send with a due time beyond MaxDelay: %v, want ErrBadOptions", err)
	}
	if st := n.Status(); st.Messages != 0 {
		t.Errorf("%d messages stored by refused requests", st.Messages)
	}
}
