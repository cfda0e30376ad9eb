package lockadmin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

// TestSameServerNamesTheGroups: the nodes Check marked as one server
// (redlock's NodeReport.SameServer, which compares run IDs and shards) make
// one group each, named once, by index and address; independent nodes, and
// nodes whose identity is unknown, pass.
func TestSameServerNamesTheGroups(t *testing.T) {
	down := errors.New("dial tcp: refused")
	reports := []redlock.NodeReport{
		{Node: 0, Addr: "a:1", RunID: "X", SameServer: []int{2, 5}},
		{Node: 1, Addr: "b:1", RunID: "Y", SameServer: []int{6}},
		{Node: 2, Addr: "c:1", RunID: "X", SameServer: []int{0, 5}},
		{Node: 3, Addr: "d:1", Err: down}, // unknown identity: not compared
		{Node: 4, Addr: "e:1", Err: down},
		{Node: 5, Addr: "f:1", RunID: "X", SameServer: []int{0, 2}},
		{Node: 6, Addr: "cluster", RunID: "Z,Y", SameServer: []int{1}},
	}
	err := SameServer(reports)
	if !errors.Is(err, ErrSameServer) {
		t.Fatalf("SameServer = %v, want ErrSameServer", err)
	}
	var se *SameServerError
	if !errors.As(err, &se) || len(se.Groups) != 2 || len(se.Groups[0]) != 3 || len(se.Groups[1]) != 2 {
		t.Fatalf("groups %+v, want nodes 0, 2, 5 and nodes 1, 6", se)
	}
	if msg := err.Error(); !strings.Contains(msg, "node 0 (a:1) and node 2 (c:1) and node 5 (f:1); node 1 (b:1) and node 6 (cluster)") {
		t.Fatalf("message %q does not name the nodes", msg)
	}
	if err := SameServer(reports[3:5]); err != nil {
		t.Fatalf("nodes not marked: %v", err)
	}
}

func TestClockWarnings(t *testing.T) {
	ms := time.Millisecond
	r := func(node int, off, rtt time.Duration) redlock.NodeReport {
		return redlock.NodeReport{Node: node, Addr: "n", ClockOffset: off, RTT: rtt}
	}
	cases := []struct {
		name    string
		reports []redlock.NodeReport
		want    []string
	}{
		{"in step", []redlock.NodeReport{r(0, 3*ms, ms), r(1, -4*ms, ms), r(2, 0, ms)}, nil},
		{"one node far", []redlock.NodeReport{r(0, 0, ms), r(1, 5*time.Second, ms), r(2, 2*ms, ms)}, []string{"node 1 (n): clock 4.998s away"}},
		{"within the measurement error", []redlock.NodeReport{r(0, 0, ms), r(1, 1200*ms, 500*ms), r(2, 0, ms)}, nil},
		{"this host far", []redlock.NodeReport{r(0, 3*time.Second, ms), r(1, 3*time.Second, ms), r(2, 3*time.Second, ms)}, []string{"this host's clock is 3s away"}},
		{"down nodes ignored", []redlock.NodeReport{r(0, 0, ms), {Node: 1, ClockOffset: time.Hour, Err: errors.New("down")}}, nil},
	}
	for _, tc := range cases {
		got := ClockWarnings(tc.reports, ClockSkew)
		if len(got) != len(tc.want) {
			t.Errorf("%s: warnings %q, want %d", tc.name, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) || !strings.Contains(got[i], "NTP") {
				t.Errorf("%s: warning %q does not say %q and what to do", tc.name, got[i], w)
			}
		}
	}
}
