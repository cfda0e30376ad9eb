package lockadmin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynqlock/asynqlock/redlock"
)

func TestSameServerGroupsNodesByRunID(t *testing.T) {
	down := errors.New("dial tcp: refused")
	reports := []redlock.NodeReport{
		{Node: 0, Addr: "a:1", RunID: "X"},
		{Node: 1, Addr: "b:1", RunID: "Y"},
		{Node: 2, Addr: "c:1", RunID: "X"},
		{Node: 3, Addr: "d:1", Err: down}, // unknown identity: not compared
		{Node: 4, Addr: "e:1", Err: down},
		{Node: 5, Addr: "f:1", RunID: "X"},
	}
	err := SameServer(reports)
	if !errors.Is(err, ErrSameServer) {
		t.Fatalf("SameServer = %v, want ErrSameServer", err)
	}
	var se *SameServerError
	if !errors.As(err, &se) || len(se.Groups) != 1 || len(se.Groups[0]) != 3 {
		t.Fatalf("groups %+v, want one group of nodes 0, 2, 5", se)
	}
	if msg := err.Error(); !strings.Contains(msg, "node 0 (a:1) and node 2 (c:1) and node 5 (f:1)") {
		t.Fatalf("message %q does not name the nodes", msg)
	}
	if err := SameServer(reports[:2]); err != nil {
		t.Fatalf("distinct nodes: %v", err)
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
