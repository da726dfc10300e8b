package egress

import (
	"errors"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/errs"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	deployed := Policy{}
	local := Policy{AllowPrivate: true, AllowHTTP: true}
	for _, tt := range []struct {
		name   string
		policy Policy
		url    string
		want   string // a word of the error, "" for none
	}{
		{"https", deployed, "https://hooks.example.com/relay", ""},
		{"https any port", deployed, "https://hooks.example.com:8443/relay?x=1", ""},
		{"https upper-case scheme", deployed, "HTTPS://hooks.example.com/", ""},
		{"http refused", deployed, "http://hooks.example.com/relay", "https"},
		{"http allowed locally", local, "http://localhost:9000/hook", ""},
		{"userinfo", deployed, "https://user:pass@hooks.example.com/", "credentials"},
		{"userinfo without password", local, "http://user@localhost/", "credentials"},
		{"empty host", deployed, "https:///relay", "no host"},
		{"opaque", deployed, "https:hooks.example.com", "no host"},
		{"ftp", deployed, "ftp://hooks.example.com/", "scheme"},
		{"ftp locally", local, "ftp://localhost/", "scheme"},
		{"no scheme", deployed, "hooks.example.com/relay", "scheme"},
		{"not a URL", deployed, "https://[::1", "not a URL"},
		{"too long", deployed, "https://hooks.example.com/" + strings.Repeat("a", 2048), "longer"},
		{"literal loopback", deployed, "https://127.0.0.1/", "loopback"},
		{"literal metadata", deployed, "https://169.254.169.254/latest/meta-data/", "link-local"},
		{"literal mapped private", deployed, "https://[::ffff:10.0.0.1]/", "private"},
		{"literal benchmarking", deployed, "https://198.18.0.1/", "reserved"},
		{"literal Teredo", deployed, "https://[2001::c0a8:101]/", "reserved"},
		{"literal site-local", deployed, "https://[fec0::1]/", "reserved"},
		{"literal IPv4-compatible loopback", deployed, "https://[::7f00:1]/", "reserved"},
		{"literal SIIT metadata", deployed, "https://[::ffff:0:a9fe:a9fe]/", "reserved"},
		{"literal public", deployed, "https://93.184.216.34/", ""},
		{"literal loopback locally", local, "http://127.0.0.1:8080/", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.policy.CheckURL(tt.url)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckURL(%q) = %v, want nil", tt.url, err)
				}
				return
			}
			var e *errs.Error
			if !errors.As(err, &e) || e.Kind != errs.Invalid || e.Param != "webhook_url" {
				t.Fatalf("CheckURL(%q) = %#v, want an Invalid *errs.Error on webhook_url", tt.url, err)
			}
			if !strings.Contains(e.Message, tt.want) {
				t.Errorf("CheckURL(%q) = %q, want it to mention %q", tt.url, e.Message, tt.want)
			}
		})
	}
}

// The dial hook is what stops DNS rebinding; it is tested on the addresses
// alone, so no test ever sends a packet to a non-loopback address.
func TestControl(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		network, addr string
		want          string // the reason, "" when allowed
	}{
		{"tcp4", "93.184.216.34:443", ""},
		{"tcp4", "8.8.8.8:80", ""},
		{"tcp4", "100.128.0.1:443", ""}, // just past CGNAT
		{"tcp4", "172.32.0.1:443", ""},  // just past 172.16/12
		{"tcp6", "[2606:4700:4700::1111]:443", ""},
		{"tcp6", "[64:ff9b::5db8:d822]:443", ""}, // NAT64 of a public address
		{"tcp4", "192.0.1.1:443", ""},            // just past 192.0.0.0/24
		{"tcp4", "198.20.0.1:443", ""},           // just past 198.18/15
		{"tcp4", "239.255.255.255:443", "multicast"},
		{"tcp6", "[2001:4860:4860::8888]:443", ""}, // 2001:4860::, not Teredo
		{"tcp6", "[2001:1::1]:443", ""},            // just past 2001::/32
		{"tcp6", "[64:ff9b:2::1]:443", ""},         // just past 64:ff9b:1::/48
		{"tcp4", "127.0.0.1:443", "loopback"},
		{"tcp4", "127.1.2.3:8080", "loopback"},
		{"tcp6", "[::1]:443", "loopback"},
		{"tcp4", "10.0.0.1:443", "private"},
		{"tcp4", "172.16.5.4:443", "private"},
		{"tcp4", "192.168.1.1:443", "private"},
		{"tcp6", "[fd00:ec2::254]:80", "private"}, // the EC2 metadata service over IPv6
		{"tcp6", "[fc00::1]:443", "private"},
		{"tcp4", "169.254.169.254:80", "link-local"},
		{"tcp6", "[fe80::1]:443", "link-local"},
		{"tcp6", "[fe80::1%eth0]:443", "link-local"},
		{"tcp4", "0.0.0.0:443", "unspecified"},
		{"tcp4", "0.1.2.3:443", "unspecified"},
		{"tcp6", "[::]:443", "unspecified"},
		{"tcp4", "224.0.0.1:443", "multicast"},
		{"tcp4", "255.255.255.255:443", "multicast"},
		{"tcp6", "[ff02::1]:443", "multicast"},
		{"tcp4", "100.64.0.1:443", "CGNAT"},
		{"tcp4", "100.127.255.254:443", "CGNAT"},
		{"tcp6", "[::ffff:127.0.0.1]:443", "loopback"},
		{"tcp6", "[::ffff:10.0.0.1]:443", "private"},
		{"tcp6", "[::ffff:169.254.169.254]:80", "link-local"},
		{"tcp6", "[::ffff:100.64.0.1]:443", "CGNAT"},
		{"tcp6", "[64:ff9b::a00:1]:443", "private"},       // NAT64 of 10.0.0.1
		{"tcp6", "[64:ff9b::a9fe:a9fe]:80", "link-local"}, // NAT64 of the metadata service
		{"tcp6", "[2002:7f00:1::1]:443", "loopback"},      // 6to4 of 127.0.0.1
		{"tcp4", "192.0.0.8:443", "reserved"},             // IETF protocol assignments
		{"tcp4", "192.0.0.255:443", "reserved"},
		{"tcp4", "198.18.0.1:443", "reserved"}, // benchmarking
		{"tcp4", "198.19.255.254:443", "reserved"},
		{"tcp4", "240.0.0.1:443", "reserved"}, // class E
		{"tcp4", "255.255.255.254:443", "reserved"},
		{"tcp6", "[::ffff:198.18.0.1]:443", "reserved"},
		{"tcp6", "[64:ff9b::c612:1]:443", "reserved"},  // NAT64 of 198.18.0.1
		{"tcp6", "[64:ff9b:1::a00:1]:443", "reserved"}, // local-use NAT64
		{"tcp6", "[64:ff9b:1:ffff::1]:443", "reserved"},
		{"tcp6", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:443", "reserved"}, // Teredo
		{"tcp6", "[2001::1]:443", "reserved"},
		{"tcp6", "[fec0::1]:443", "reserved"}, // site-local
		{"tcp6", "[feff::1]:443", "reserved"},
		// The deprecated IPv4-compatible ::/96 and SIIT's IPv4-translated
		// ::ffff:0:0:0/96 embed an IPv4 address a host may still route to:
		// refused whatever it is, public ones too.
		{"tcp6", "[::7f00:1]:443", "reserved"},
		{"tcp6", "[::a9fe:a9fe]:80", "reserved"},
		{"tcp6", "[::5db8:d822]:443", "reserved"},
		{"tcp6", "[::0.0.0.2]:443", "reserved"},
		{"tcp6", "[::ffff:0:7f00:1]:443", "reserved"},
		{"tcp6", "[::ffff:0:a00:1]:443", "reserved"},
		{"tcp6", "[::ffff:0:5db8:d822]:443", "reserved"},
		{"tcp4", "not-an-address:443", "unparseable"},
		{"udp4", "93.184.216.34:53", "non-TCP"},
	} {
		t.Run(tt.network+" "+tt.addr, func(t *testing.T) {
			t.Parallel()
			err := Policy{}.Control(tt.network, tt.addr, nil)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Control(%s) = %v, want allowed", tt.addr, err)
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(refused.Reason, tt.want) || refused.Addr != tt.addr {
				t.Fatalf("Control(%s) = %v, want refused as %s, naming the address", tt.addr, err, tt.want)
			}
			if tt.network == "tcp4" || tt.network == "tcp6" {
				if err := (Policy{AllowPrivate: true}).Control(tt.network, tt.addr, nil); err != nil && refused.Reason != "unparseable" {
					t.Errorf("with AllowPrivate, Control(%s) = %v, want allowed", tt.addr, err)
				}
			}
		})
	}
}
