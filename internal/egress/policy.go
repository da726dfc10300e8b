// Package egress decides where the service may send a request to a URL a
// client gave it: completion webhooks (internal/webhook) and workflow
// callbacks (internal/workflow). CheckURL refuses a URL when it is given;
// Control refuses an address at dial time, after DNS (SECURITY.md
// "Outbound requests: webhooks and workflow callbacks (SSRF)").
package egress

import (
	"fmt"
	"net/netip"
	"net/url"
	"syscall"

	"github.com/relaybatch/relay/internal/errs"
)

// Policy decides where a webhook may go. A deployment uses the zero Policy;
// the local runtime allows both, since its receivers live on the developer's
// machine.
type Policy struct {
	AllowPrivate bool // loopback, private, link-local… addresses may be dialled
	AllowHTTP    bool // plain http URLs are accepted
}

// maxURLLen bounds what is stored on the batch and sent on every attempt.
const maxURLLen = 2048

// CheckURL refuses a webhook URL the policy never lets through: a scheme
// other than https (or http when allowed), no host, credentials in the URL,
// or a literal IP address the dialer would refuse. The API calls it when a
// batch is created, so the client learns at once rather than from failed
// deliveries. Host names are not resolved here: what they resolve to now
// says nothing about delivery time, so the dialer checks that.
func (p Policy) CheckURL(raw string) error {
	if len(raw) > maxURLLen {
		return errs.Invalidf("webhook_url", "webhook_url is longer than %d characters", maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errs.Invalidf("webhook_url", "webhook_url is not a URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowHTTP:
	case u.Scheme == "http":
		return errs.Invalidf("webhook_url", "webhook_url must use https")
	default:
		return errs.Invalidf("webhook_url", "webhook_url must be an https URL, got scheme %q", u.Scheme)
	}
	if u.User != nil {
		return errs.Invalidf("webhook_url", "webhook_url must not carry credentials; verify deliveries with the webhook-signature header")
	}
	host := u.Hostname()
	if host == "" {
		return errs.Invalidf("webhook_url", "webhook_url has no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if reason := p.refuse(ip); reason != "" {
			return errs.Invalidf("webhook_url", "webhook_url points at %s, a %s address; webhooks only go to public addresses", host, reason)
		}
	}
	return nil
}

// RefusedError is a dial the policy stopped before any packet left.
type RefusedError struct {
	Addr   string // the address about to be dialled
	Reason string // e.g. "loopback", "private"
}

// Error leaves the address out: the dialer's *net.OpError around it
// already names it ("dial tcp 10.0.0.1:443: refused: private address…").
// It names webhooks; Explain names what else was dialled.
func (e *RefusedError) Error() string { return e.Explain("webhooks") }

// Explain says why the dial was refused, naming what was dialled
// ("webhooks", "workflow callbacks", "tool calls").
func (e *RefusedError) Explain(what string) string {
	return fmt.Sprintf("refused: %s address; %s only go to public addresses", e.Reason, what)
}

// Control is the net.Dialer Control hook. It sees the address about to be
// connected, after DNS, so a name that resolved to a public address at
// create time and to a private one now (DNS rebinding) is still refused.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return &RefusedError{Addr: address, Reason: "non-TCP (" + network + ")"}
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address that cannot be checked is not dialled.
		return &RefusedError{Addr: address, Reason: "unparseable"}
	}
	if reason := p.refuse(ap.Addr()); reason != "" {
		return &RefusedError{Addr: address, Reason: reason}
	}
	return nil
}

// Ranges netip has no predicate for.
var (
	cgnat     = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT: shared, not the public internet
	thisNet   = netip.MustParsePrefix("0.0.0.0/8")     // Linux routes 0.x to the host itself
	broadcast = netip.MustParseAddr("255.255.255.255")
	// Special-purpose ranges (RFC 6890) that are not the public internet:
	// IETF protocol assignments (192.0.0.8 and the like are NAT and DNS64
	// service addresses), benchmarking (lab networks, often inside clouds),
	// the reserved class E, IPv6 local-use NAT64 (RFC 8215: it reaches
	// whatever IPv4 the local network maps it to), Teredo (a tunnel to an
	// IPv4 address the prefix hides), the deprecated site-local fec0::/10,
	// and the two other IPv6 forms of an IPv4 address: the deprecated
	// IPv4-compatible ::/96 (RFC 4291: ::7f00:1 is 127.0.0.1 to a stack that
	// still maps it) and SIIT's IPv4-translated ::ffff:0:0:0/96 (RFC 2765:
	// ::ffff:0:7f00:1), refused outright since no public receiver uses them
	// (::1 and :: are in ::/96 but caught first, as loopback and unspecified).
	reserved = []netip.Prefix{
		netip.MustParsePrefix("192.0.0.0/24"),
		netip.MustParsePrefix("198.18.0.0/15"),
		netip.MustParsePrefix("240.0.0.0/4"),
		netip.MustParsePrefix("64:ff9b:1::/48"),
		netip.MustParsePrefix("2001::/32"),
		netip.MustParsePrefix("fec0::/10"),
		netip.MustParsePrefix("::/96"),
		netip.MustParsePrefix("::ffff:0:0:0/96"),
	}
	// IPv6 prefixes that carry an IPv4 address in their low 32 bits and
	// reach it through a gateway, so 64:ff9b::a00:1 means 10.0.0.1.
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// refuse returns why ip may not be dialled, or "" when it may.
func (p Policy) refuse(ip netip.Addr) string {
	if p.AllowPrivate {
		return ""
	}
	ip = ip.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast(): // 169.254/16 holds the cloud metadata service
		return "link-local"
	case ip.IsUnspecified(), thisNet.Contains(ip):
		return "unspecified"
	case ip.IsMulticast(), ip == broadcast:
		return "multicast"
	case cgnat.Contains(ip):
		return "shared (CGNAT)"
	case inAny(reserved, ip):
		return "reserved"
	case nat64.Contains(ip):
		return p.refuse(embedded4(ip, 12))
	case sixTo4.Contains(ip):
		return p.refuse(embedded4(ip, 2))
	}
	return ""
}

func inAny(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// embedded4 is the IPv4 address at byte offset off of an IPv6 address.
func embedded4(ip netip.Addr, off int) netip.Addr {
	b := ip.As16()
	return netip.AddrFrom4([4]byte(b[off : off+4]))
}
