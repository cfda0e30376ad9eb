// Package redistest runs real redis-server processes for integration tests
// and lets a test inject faults into them.
//
// Every [Node] is one independent redis-server master (no replication, no
// persistence) listening on a free loopback port, fronted by an in-process
// TCP proxy whose address, [Node.Addr], is what clients should use. The
// address stays the same across [Node.Restart], so a client configured once
// sees the node go away and come back.
//
// Faults come from two places:
//
//   - the process: [Node.Kill] (SIGKILL, the node stays down),
//     [Node.Restart] (start again on the same port with an empty data set),
//     [Node.Stop] and [Node.Cont] (SIGSTOP/SIGCONT: connections hang);
//   - the proxy: [Node.SetLatency] (delay every forwarded chunk),
//     [Node.BlackHole] (a partition: nothing is forwarded or answered, open
//     connections included), [Node.Refuse] (all connections are reset) and
//     [Node.Heal] (back to normal).
//
// For tests of how clients connect rather than of faults, [StartServer]
// starts a server without a proxy, configured with [WithTLS] (a TLS port with
// a private CA made by [NewTLSFiles], optionally requiring client
// certificates), [WithUser], [WithPassword] or [WithoutDefaultUser];
// [StartSentinel] a Sentinel with its own password watching such a master;
// [StartRedisCluster] a Redis Cluster of masters sharing the slots; and
// [ClosedAddr] an address where nothing listens.
//
// Everything a test starts is torn down by testing.TB.Cleanup: processes are
// killed and reaped, proxies closed and their goroutines waited for. On Linux
// the servers also receive SIGKILL if the test process dies.
//
// When redis-server is not installed the helpers skip the test with a loud
// message, except when the environment variable CI is "true": there a
// missing server fails the test, so that CI can never pass by skipping.
package redistest
