package transport

import (
	"crypto/sha1"
	"encoding/hex"
)

// Script is a Lua script sent as EVALSHA, falling back to EVAL when a node
// does not have it cached.
type Script struct {
	Src string
	SHA string
}

// NewScript is the script of source src.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(sum[:])}
}
