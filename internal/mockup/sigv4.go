package mockup

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The Bedrock routes take a Bedrock API key as a bearer token or a SigV4
// signature. The mock cannot know the secret key a request was signed
// with, so it checks everything else Bedrock's endpoint checks first: the
// scheme, the credential scope (date, region, service), the signed
// headers, the request time and the form of the signature.

const (
	sigV4Scheme  = "AWS4-HMAC-SHA256"
	sigV4Service = "bedrock"
	amzDate      = "20060102T150405Z"
	// maxSkew is how far a request's X-Amz-Date may be from now, as AWS allows.
	maxSkew = 15 * time.Minute
)

var signature = regexp.MustCompile(`^[0-9a-f]{64}$`)

// bedrockAuthProblem says why r may not call a Bedrock route in region:
// the AWS error type and message, or "" when it may.
func bedrockAuthProblem(r *http.Request, region string, now time.Time) (typ, msg string) {
	auth := r.Header.Get("Authorization")
	if token, ok := strings.CutPrefix(auth, "Bearer "); ok && strings.TrimSpace(token) != "" {
		return "", ""
	}
	if auth == "" {
		return "MissingAuthenticationTokenException", "Missing Authentication Token: sign the request with SigV4 (service bedrock) or send a Bedrock API key as Authorization: Bearer"
	}
	incomplete := func(format string, args ...any) (string, string) {
		return "IncompleteSignatureException", fmt.Sprintf(format, args...)
	}
	params, ok := strings.CutPrefix(auth, sigV4Scheme+" ")
	if !ok {
		return incomplete("Authorization header requires the %s scheme or Bearer", sigV4Scheme)
	}
	fields := map[string]string{}
	for _, kv := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		fields[k] = v
	}
	for _, k := range []string{"Credential", "SignedHeaders", "Signature"} {
		if fields[k] == "" {
			return incomplete("Authorization header requires the '%s' parameter", k)
		}
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[0] == "" || scope[4] != "aws4_request" {
		return incomplete("Credential %q is not access-key/date/region/service/aws4_request", fields["Credential"])
	}
	date, err := time.Parse(amzDate, r.Header.Get("X-Amz-Date"))
	switch {
	case err != nil:
		return incomplete("the X-Amz-Date header %q is not a date like 20060102T150405Z", r.Header.Get("X-Amz-Date"))
	case scope[1] != date.Format("20060102"):
		return "InvalidSignatureException", fmt.Sprintf("Credential should be scoped to a valid date: %s, not %s", date.Format("20060102"), scope[1])
	case scope[2] != region:
		return "InvalidSignatureException", fmt.Sprintf("Credential should be scoped to a valid region: %s, not %s", region, scope[2])
	case scope[3] != sigV4Service:
		return "InvalidSignatureException", fmt.Sprintf("Credential should be scoped to correct service: '%s', not '%s'", sigV4Service, scope[3])
	case now.Sub(date) > maxSkew || date.Sub(now) > maxSkew:
		return "InvalidSignatureException", fmt.Sprintf("Signature expired: %s is more than %s from now", date.Format(amzDate), maxSkew)
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	if !slices.IsSorted(signed) {
		return incomplete("SignedHeaders %q are not sorted", fields["SignedHeaders"])
	}
	for _, h := range signed {
		if h != strings.ToLower(h) || (h != "host" && r.Header.Get(h) == "") {
			return incomplete("signed header %q is not lower case or not in the request", h)
		}
	}
	// Host and the date must be signed, and so must every x-amz- header
	// sent (the session token of a Lambda role's credentials among them).
	must := []string{"host", "x-amz-date"}
	for name := range r.Header {
		if h := strings.ToLower(name); strings.HasPrefix(h, "x-amz-") {
			must = append(must, h)
		}
	}
	for _, h := range must {
		if !slices.Contains(signed, h) {
			return incomplete("SignedHeaders must include %s", h)
		}
	}
	if !signature.MatchString(fields["Signature"]) {
		return incomplete("Signature %q is not 64 lower-case hex digits", fields["Signature"])
	}
	return "", ""
}
