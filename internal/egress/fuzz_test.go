package egress

import (
	"net/netip"
	"net/url"
	"testing"

	"github.com/relaybatch/relay/internal/errs"
)

// FuzzCheckURL: whatever a client sends as webhook_url, a deployment's
// policy accepts only an https URL with a host and no credentials, whose
// host, when it is an address, is a public one; anything else is a 400.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/hook", "http://example.com/", "https://127.0.0.1/", "https://[::ffff:10.0.0.1]/",
		"https://[64:ff9b::a9fe:a9fe]/", "https://user:pw@example.com/", "https://169.254.169.254/latest",
		"https://[fe80::1%25eth0]/", "https:///x", "javascript:alert(1)", "https://0x7f000001/", "https://2130706433/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := Policy{}.CheckURL(raw)
		if err != nil {
			if !errs.Is(err, errs.Invalid) {
				t.Fatalf("CheckURL(%q): %v is not a 400", raw, err)
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil || u.Scheme != "https" || u.Hostname() == "" || u.User != nil || len(raw) > maxURLLen {
			t.Fatalf("CheckURL accepted %q", raw)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			ip = ip.Unmap()
			if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() {
				t.Fatalf("CheckURL accepted %q, which points at %v", raw, ip)
			}
		}
	})
}

// FuzzControl: the dialer refuses every address it cannot check, and every
// address it lets through is public.
func FuzzControl(f *testing.F) {
	for _, s := range []string{"93.184.216.34:443", "127.0.0.1:443", "[::1]:443", "[::ffff:192.168.0.1]:80", "[2002:a00:1::]:443", "[::7f00:1]:443", "[::ffff:0:7f00:1]:443", "10.0.0.1", "x:1"} {
		f.Add("tcp4", s)
		f.Add("tcp6", s)
	}
	f.Add("udp", "93.184.216.34:53")
	f.Fuzz(func(t *testing.T, network, address string) {
		if err := (Policy{}).Control(network, address, nil); err != nil {
			return
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil || (network != "tcp4" && network != "tcp6") {
			t.Fatalf("control let %s %q through", network, address)
		}
		ip := ap.Addr().Unmap()
		if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() {
			t.Fatalf("control let %s through, which is %v", address, ip)
		}
	})
}
