package hypervisor_test
import ("testing";"context";"log/slog";"os";"time"
 "github.com/stockade-dev/stockade/hypervisor")
func TestDbg(t *testing.T) {
	l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := hypervisor.Connect(context.Background(), hypervisor.Config{URI: "test:///default", InstallationID: "dbg", Logger: l})
	if err != nil { t.Fatal(err) }
	_, err = h.Create(context.Background(), hypervisor.DomainSpec{ID: "x1", VCPUs: 1, MemoryMiB: 64, Kernel: "/k"})
	t.Log(err)
	t.Log(h.Shutdown(context.Background(), "x1"))
	time.Sleep(time.Second)
	for { select { case ev := <-h.Events(): t.Logf("%+v", ev); default: return } }
}
