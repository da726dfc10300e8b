package localstack

import (
	"net"
	"strings"
	"testing"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func replaceMock(s, addr string) string { return strings.ReplaceAll(s, "MOCK", addr) }

func netListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
