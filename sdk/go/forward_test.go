package stockade

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A web server the code starts inside: answers each connection, then closes it.
const webServer = `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 8000)); s.listen()
while True:
    c, _ = s.accept(); c.recv(65536)
    c.sendall(b'HTTP/1.0 200 OK\r\n\r\nhello from inside'); c.close()
`

func TestAPortInsideIsReachedThroughAForwardAndDialPort(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	sb := sandbox(t, c, Spec{})
	if _, err := sb.Detach(ctx, []string{"python3", "-c", webServer}); err != nil {
		t.Fatal(err)
	}
	f, err := sb.Forward(ctx, 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Addr(), "127.0.0.1:") || f.URL() != "http://"+f.Addr() {
		t.Fatalf("addr %q url %q", f.Addr(), f.URL())
	}
	var body string
	for i := 0; i < 100 && body == ""; i++ {
		r, err := http.Get(f.URL())
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		body = string(b)
	}
	if body != "hello from inside" {
		t.Fatalf("through the forward: %q", body)
	}
	// One connection by hand, without a listener.
	conn, err := sb.DialPort(ctx, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(conn)
	_ = conn.Close()
	if !strings.HasSuffix(string(got), "hello from inside") {
		t.Fatalf("through DialPort: %q", got)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", f.Addr(), 2*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the forward still listens after its close")
	}
	// A port nothing listens on is refused by name; a port that is no port too.
	_, err = sb.DialPort(ctx, 8001)
	var se *Error
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "8001") {
		t.Fatalf("a port with nothing behind it: %v", err)
	}
	if _, err := sb.Forward(ctx, 0, 0); !errors.As(err, &se) || se.Code != CodeInvalidSpec {
		t.Fatalf("port 0: %v", err)
	}
}
