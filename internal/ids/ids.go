// Package ids makes the service's object ids and secrets.
package ids

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// New returns prefix, 11 hex digits of the Unix time in milliseconds, then
// 14 random hex digits. Ids sort by creation time, so a DynamoDB query on
// them lists newest first without an index.
func New(prefix string) string {
	var b [7]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s%011x%s", prefix, time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// Secret returns n random bytes, base64url-encoded without padding.
func Secret(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Valid reports whether id has the prefix and a sane body: ids go into
// DynamoDB and S3 keys, so anything outside [A-Za-z0-9_-] is refused before
// it gets near them.
func Valid(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) == 0 || len(rest) > 64 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
