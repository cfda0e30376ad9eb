package redisurl_test

import (
	"fmt"

	"github.com/asynqlock/asynqlock/redisurl"
)

// A lock node URL as REDLOCK_NODES or redlock.NewFromURLs take it, read into
// go-redis options; a URL that cannot be read is refused without quoting the
// password.
func ExampleParseLockNode() {
	single, _, err := redisurl.ParseLockNode("rediss://:s3cret@redis-a:6380/2")
	if err != nil {
		panic(err)
	}
	fmt.Println(single.Addr, single.DB, single.TLSConfig != nil)

	_, cluster, _ := redisurl.ParseLockNode("redis-cluster://redis-b:7000?addr=redis-c:7001")
	fmt.Println(cluster.Addrs)

	_, _, err = redisurl.ParseLockNode("redis://:pa/ss@redis-a:6379")
	fmt.Println(err)
	// Output:
	// redis-a:6380 2 true
	// [redis-b:7000 redis-c:7001]
	// URL cannot be parsed: percent-encode the characters / ? # @ % : in the user, the password and the password parameter
}
