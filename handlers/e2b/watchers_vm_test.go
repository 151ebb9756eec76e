package e2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/stockade-dev/stockade/handlers/e2b/proto/filesystem"
	"github.com/stockade-dev/stockade/handlers/e2b/proto/filesystem/filesystemconnect"
)

// envdHeaders sends what the SDKs send on every envd call.
type envdHeaders struct {
	token, sandboxID string
}

func (h envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", h.token)
	r.Header.Set("E2b-Sandbox-Id", h.sandboxID)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	return http.DefaultTransport.RoundTrip(r)
}

// TestE2BPollingWatchers drives the Python sync SDK's watcher RPCs
// (CreateWatcher, GetWatcherEvents, RemoveWatcher; the Python SDK itself
// cannot be installed here) with a Connect JSON client, as that SDK speaks
// it, on a real VM: events written after the create come back once, an
// access token of another sandbox finds no such watcher, a removed one is
// not found, a watch of a missing folder is not found.
func TestE2BPollingWatchers(t *testing.T) {
	e := startSDK(t, false)
	ctx := context.Background()
	create := func() (id, token string) {
		a := do(t, "POST", e.env.URL+"/e2b/sandboxes", `{"templateID":"base","timeout":300}`, "X-API-KEY", e.tokA)
		var sb struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		}
		if a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &sb) != nil || sb.EnvdAccessToken == "" {
			t.Fatalf("Got(create) = %d %.300s; want 201 with an access token", a.status, a.body)
		}
		t.Cleanup(func() { do(t, "DELETE", e.env.URL+"/e2b/sandboxes/"+sb.SandboxID, "", "X-API-KEY", e.tokA) })
		return sb.SandboxID, sb.EnvdAccessToken
	}
	client := func(id, token string) filesystemconnect.FilesystemClient {
		return filesystemconnect.NewFilesystemClient(&http.Client{Transport: envdHeaders{token, id}}, e.env.URL, connect.WithProtoJSON())
	}
	id, token := create()
	fs := client(id, token)
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/home/user/w"})); err != nil {
		t.Fatal(err)
	}
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/w"}))
	if err != nil || cw.Msg.GetWatcherId() == "" {
		t.Fatalf("Got(CreateWatcher) = %v, %v; want a watcher id", cw, err)
	}
	wid := cw.Msg.GetWatcherId()
	put := do(t, "POST", e.env.URL+"/files?path=/home/user/w/x.txt", "1", "X-Access-Token", token, "E2b-Sandbox-Id", id, "Content-Type", "application/octet-stream")
	if put.status != http.StatusOK {
		t.Fatalf("Got(write) = %d %.200s; want 200", put.status, put.body)
	}
	var seen []*filesystem.FilesystemEvent
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid}))
		if err != nil {
			t.Fatalf("GetWatcherEvents = %v", err)
		}
		seen = append(seen, r.Msg.GetEvents()...)
		if len(seen) > 0 && strings.Contains(seen[len(seen)-1].GetName(), "x.txt") {
			break
		}
	}
	if len(seen) == 0 || !strings.Contains(seen[0].GetName(), "x.txt") || seen[0].GetType() == filesystem.EventType_EVENT_TYPE_UNSPECIFIED {
		t.Fatalf("Got(events) = %v; want x.txt's create or write", seen)
	}
	if r, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); err != nil || len(r.Msg.GetEvents()) != 0 {
		t.Errorf("Got(second poll) = %v, %v; want no event twice", r, err)
	}

	// Another sandbox's token (the same tenant) does not find it.
	otherID, otherToken := create()
	other := client(otherID, otherToken)
	if _, err := other.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Got(another sandbox's poll) = %v; want not_found", err)
	}
	if _, err := other.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: wid})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Got(another sandbox's remove) = %v; want not_found", err)
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: wid})); err != nil {
		t.Errorf("Got(RemoveWatcher) = %v; want nil", err)
	}
	if _, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Got(poll after remove) = %v; want not_found", err)
	}
	// getMetrics: one point now, from the sandbox's cgroup; another
	// tenant's id is E2B's 404.
	m := do(t, "GET", e.env.URL+"/e2b/sandboxes/"+id+"/metrics", "", "X-API-KEY", e.tokA)
	var pts []struct {
		Timestamp  string  `json:"timestamp"`
		CPUUsedPct float64 `json:"cpuUsedPct"`
		CPUCount   int     `json:"cpuCount"`
		MemUsed    uint64  `json:"memUsed"`
		MemTotal   uint64  `json:"memTotal"`
	}
	if m.status != http.StatusOK || json.Unmarshal([]byte(m.body), &pts) != nil || len(pts) != 1 || pts[0].CPUCount < 1 ||
		pts[0].MemUsed == 0 || pts[0].MemUsed > pts[0].MemTotal || pts[0].CPUUsedPct < 0 || pts[0].CPUUsedPct > 100 || pts[0].Timestamp == "" {
		t.Errorf("Got(metrics) = %d %.300s; want one point with the sandbox's CPU share and memory", m.status, m.body)
	}
	if m := do(t, "GET", e.env.URL+"/e2b/sandboxes/"+id+"/metrics", "", "X-API-KEY", e.tokB); m.status != http.StatusNotFound || e2bCode(m.body) != http.StatusNotFound {
		t.Errorf("Got(another tenant's metrics) = %d %.200s; want 404 with code 404", m.status, m.body)
	}

	var ce *connect.Error
	if _, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/nope"})); !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound {
		t.Errorf("Got(watch of a missing folder) = %v; want not_found", err)
	}
}
