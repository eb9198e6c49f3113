package tlsfiles

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

func TestLoad(t *testing.T) {
	files := redistest.MakeCertificates(t, t.TempDir())
	c, err := Load(files.CA, files.ClientCert, files.ClientKey, "redis.example")
	if err != nil || c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "redis.example" {
		t.Fatalf("Load: %+v %v", c, err)
	}
	if _, err := Load(files.CA, files.ClientCert, "", ""); err == nil {
		t.Error("Load with a cert and no key succeeded")
	}
	if _, err := Load(files.ClientKey, "", "", ""); err == nil {
		t.Error("Load with a key file as the CA succeeded")
	}
}
