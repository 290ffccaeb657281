package stockade

// TCP with TLS and a token, against a second daemon: the certificate is checked
// against the CA given (and refused without it), the token is required, and the
// daemon's quota comes back as ErrLimit.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sdk/go/internal/testdaemon"
)

// writeCerts makes a CA and a certificate it signs for 127.0.0.1, as PEM files in dir.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stockade go test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(srvKey)
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", srvDER), write("key.pem", "PRIVATE KEY", keyDER)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestTCPWithTLSAndATokenAndAQuota(t *testing.T) {
	needDaemon(t)
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	const token = "go-sdk-token-0123456789"
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte(token+"\n"), 0o600)
	port := freePort(t)
	addr := "tcp://127.0.0.1:" + strconv.Itoa(port)
	d, err := testdaemon.Serve(daemon.cli, dir, "--listen", addr, "--tls-cert", cert, "--tls-key", key,
		"--token-file", tokens, "--max-sandboxes-per-tenant", "1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if err := d.WaitFor(func() bool { return testdaemon.Dials("tcp", "127.0.0.1:"+strconv.Itoa(port)) }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	c, err := Connect(ctx, Options{Host: addr, Token: token, TLSCA: ca})
	if err != nil {
		t.Fatalf("TLS with the CA and the token: %v", err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if sb.Info().OwnerPID != 0 {
		t.Errorf("over TCP no owner pid is sent (it means nothing on another host): %d", sb.Info().OwnerPID)
	}
	if r, err := sb.Exec(ctx, []string{"echo", "over tls"}); err != nil || string(r.Stdout) != "over tls\n" {
		t.Fatalf("exec over TLS: %+v %v", r, err)
	}
	// The tenant's quota is one sandbox.
	if _, err := c.Create(ctx, Spec{}); !errors.Is(err, ErrLimit) {
		t.Errorf("a second sandbox over the quota: %v", err)
	}
	// Another tenant does not see this one's sandbox; a wrong token is refused.
	for _, bad := range []string{"wrong-token-0123456789", ""} {
		_, err := Connect(ctx, Options{Host: addr, Token: bad, TLSCA: ca})
		if !errors.Is(err, ErrDenied) {
			t.Errorf("token %q: %v", bad, err)
		}
	}
	// Without the CA the system's roots do not know the daemon's certificate.
	t.Setenv("STOCKADE_TLS_CA", "")
	https := "https://127.0.0.1:" + strconv.Itoa(port)
	_, err = Connect(ctx, Options{Host: https, Token: token})
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "TLS") || !strings.Contains(err.Error(), "STOCKADE_TLS_CA") {
		t.Errorf("TLS without the CA: %v", err)
	}
	if c, err := Connect(ctx, Options{Host: https, Token: token, TLSCA: ca}); err != nil {
		t.Errorf("https:// with the CA: %v", err)
	} else {
		c.Close()
	}
	// tcp:// to loopback without a CA is plain text, which a TLS daemon does not speak.
	if _, err = Connect(ctx, Options{Host: addr, Token: token}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("plain text to a TLS daemon: %v", err)
	}
	// The environment names the daemon, its token and its CA as Options do.
	t.Setenv("STOCKADE_HOST", addr)
	t.Setenv("STOCKADE_TOKEN", token)
	t.Setenv("STOCKADE_TLS_CA", ca)
	fromEnv, err := Connect(ctx, Options{})
	if err != nil {
		t.Fatalf("from the environment: %v", err)
	}
	defer fromEnv.Close()
	list, err := fromEnv.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
		t.Fatalf("list through the environment's client: %v %v", list, err)
	}
	// A daemon over TCP may be on another host: its languages are probed in a
	// sandbox there, and run_code runs on its root.
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	// (The quota's slot comes back once the teardown, which runs after the answer, ends.)
	langs, err := fromEnv.AvailableLanguages(ctx)
	for i := 0; i < 100 && errors.Is(err, ErrLimit); i++ {
		time.Sleep(100 * time.Millisecond)
		langs, err = fromEnv.AvailableLanguages(ctx)
	}
	if err != nil || !slices.Contains(langs, "python") || !slices.Contains(langs, "sh") || slices.Contains(langs, "cobol") {
		t.Fatalf("probed languages %v %v", langs, err)
	}
	r, err := fromEnv.RunCode(ctx, "python", "print('over tcp')")
	for i := 0; i < 100 && errors.Is(err, ErrLimit); i++ {
		time.Sleep(100 * time.Millisecond)
		r, err = fromEnv.RunCode(ctx, "python", "print('over tcp')")
	}
	if err != nil || string(r.Stdout) != "over tcp\n" {
		t.Fatalf("run_code over TCP: %+v %v", r, err)
	}
}
