package resources

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Pure helpers of the CDK app (infra/): here, not in infra, so make unit
// tests them without compiling the CDK (README "Tests").

// API Gateway's limits on an integration: a buffered one answers within
// 29 s (more needs a quota increase); a stream may last 15 minutes. Past
// its first 10 MB a stream is throttled to 2 MB/s, so a file of 200 MB
// takes about 100 s: the api function's own timeout bounds a stream too.
const (
	MaxBufferedTimeout = 29 * time.Second
	MaxStreamTimeout   = 15 * time.Minute
)

// StreamTimeout lets a stream run as long as the function serving it may.
func StreamTimeout(fn time.Duration) time.Duration {
	return min(max(fn, MaxBufferedTimeout), MaxStreamTimeout)
}

// ValidPrefix keeps every derived name valid: bucket names are the
// strictest (lower case, digits, hyphens, at most 63 characters with the
// account and region appended).
func ValidPrefix(prefix string) error {
	if prefix == "" || len(prefix) > 20 {
		return fmt.Errorf("context prefix: %q must be 1 to 20 characters", prefix)
	}
	for i, r := range prefix {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(prefix)-1
		if !ok {
			return fmt.Errorf("context prefix: %q may hold only lower-case letters, digits and inner hyphens", prefix)
		}
	}
	return nil
}

var notAlnum = regexp.MustCompile(`[^A-Za-z0-9]+`)

// LogicalName turns OPENAI_API_KEY into OpenaiApiKey: a construct id that
// stays the same as long as the env name does.
func LogicalName(env string) string {
	var b strings.Builder
	for _, part := range notAlnum.Split(env, -1) {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + strings.ToLower(part[1:]))
	}
	return b.String()
}
