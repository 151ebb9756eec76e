package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/handlers"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestNewRequiresEveryDependency: no service is optional, so none can
// serve as a feature flag; a missing one is named at startup.
func TestNewRequiresEveryDependency(t *testing.T) {
	_, err := handlers.New(handlers.Config{}, handlers.Deps{})
	if err == nil {
		t.Fatal("Got(handlers.New without dependencies) = nil error; want the missing ones named")
	}
	for _, name := range []string{"Store", "Audit", "IdP", "Ready", "VMs", "Sandboxes", "Terminals", "Secrets", "Policies",
		"Egress", "Usage", "Compliance", "Workflows", "Runs", "Integrations", "Templates"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Got(error) = %q; want it to name %s", err, name)
		}
	}
	// The composition root provides every one, also without libvirt.
	env := webtest.New(t, webtest.Options{})
	if s, body := env.Anonymous().GetPage(t, "/readyz"); s != http.StatusOK {
		t.Errorf("Got(GET /readyz of an app without libvirt) = %d %s; want 200: VM pools that never started are not a readiness check", s, body)
	}
}
