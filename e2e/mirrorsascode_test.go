package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
)

// TestMirrorsAsCodeReal: `kmirror mirrors --apply/--diff/--export` against a real kmirror
// in front of a real SASL destination (StandardAuthorizer) mirroring a real source, the CLI
// run in-process as admin (super user) or alice (nothing on CLUSTER). One cluster pair and
// one instance serve every step; the steps build on each other.
func TestMirrorsAsCodeReal(t *testing.T) {
	began := time.Now()
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t, kafkatest.WithSASL())
	in := startSASLInstance(t, dst, filepath.Join(t.TempDir(), "audit.log"))
	addr := in.Proxy.AdvertisedAddr()
	src.CreateKeptTopic(t, "orders", 1)
	src.CreateKeptTopic(t, "payments", 1)
	produce(t, src, "orders", 1, 30, kgo.NoCompression())
	dir := t.TempDir()
	asUser := func(user string) func(args ...string) cliRun {
		cfg := writeTestFile(t, dir, user+".properties", fmt.Sprintf("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=%s\nsasl.username=%s\nsasl.password=%s\n",
			kafkatest.MechanismSCRAM, user, dst.Password(user)))
		return func(args ...string) cliRun {
			return runMirrorsCLI(t, append([]string{"--bootstrap-server", addr, "--command-config", cfg, "--timeout", "90s"}, args...)...)
		}
	}
	admin, alice := asUser(kafkatest.AdminUser), asUser(kafkatest.AliceUser)
	base := "mirrors:\n  - name: dr\n    configs:\n      bootstrap.servers: " + src.BootstrapString() +
		"\n      fetch.wait.max.ms: 100\n      metadata.refresh.interval.ms: 1000\n"
	file := writeTestFile(t, dir, "mirrors.yaml", base+"    topics: [orders, payments]\n")

	t.Run("a principal without ALTER on CLUSTER can diff but apply is refused", func(t *testing.T) {
		alice("--diff", "-f", file).want(t, 0, "+ create mirror dr (bootstrap.servers="+src.BootstrapString(), "+ mirror dr: add topics orders, payments")
		r := alice("--apply", "-f", file).want(t, 1, "+ create mirror dr")
		r.wantErr(t, "ALTER on CLUSTER is required to create mirror dr (principal User:alice)")
		admin("--list").want(t, 0).wantNot(t, "dr ")
	})
	t.Run("apply creates, the second apply changes nothing", func(t *testing.T) {
		admin("--apply", "-f", file).want(t, 0, "Created mirror dr", "Topic orders: added to mirror dr.", "Topic payments: added to mirror dr.", "Applied 2 changes.")
		waitMirrored(t, saslClient(t, dst, addr, kafkatest.AdminUser), "dr", map[string]int64{"orders": 30})
		r := admin("--apply", "-f", file).want(t, 0)
		if r.stdout != "No changes: the mirrors are as "+file+" declares.\n" {
			t.Fatalf("second apply printed more than 'No changes':\n%s", r)
		}
	})
	t.Run("a changed config is shown by diff, applied once", func(t *testing.T) {
		changed := writeTestFile(t, dir, "changed.yaml", base+"      replication.throttled.rate: 5000000\n    topics: [orders, payments]\n")
		admin("--diff", "-f", changed).want(t, 0, "~ mirror dr: config replication.throttled.rate: 0 -> 5000000")
		admin("--apply", "-f", changed).want(t, 0, "Changed 1 config of mirror dr.", "Applied 1 change.")
		admin("--describe", "--mirror", "dr", "--configs").want(t, 0, "replication.throttled.rate")
		admin("--apply", "-f", changed).want(t, 0, "No changes")
		admin("--apply", "-f", file).want(t, 0, "~ mirror dr: config replication.throttled.rate: 5000000 -> default 0")
	})
	t.Run("a failover needs --allow-destructive", func(t *testing.T) {
		failover := writeTestFile(t, dir, "failover.yaml", base+"    topics: [orders]\n    failed_over: [payments]\n")
		admin("--diff", "-f", failover).want(t, 0, "- mirror dr: fail over topic payments", "1 change marked - or ! above needs --allow-destructive")
		admin("--apply", "-f", failover).want(t, 1).wantErr(t, "refusing 1 destructive change without --allow-destructive; nothing was changed")
		admin("--describe", "--mirror", "dr").want(t, 0).wantNot(t, "STOPP")
		admin("--apply", "-f", failover, "--allow-destructive").want(t, 0, "- mirror dr: fail over topic payments", "Topic payments: failover requested")
		polltest.Eventually(t, 2*time.Minute, "payments STOPPED", func() (bool, string) {
			r := admin("--describe", "--mirror", "dr", "--json")
			var d mirrorcli.DescribeJSON
			if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || len(d.Mirrors) != 1 {
				return false, r.String()
			}
			for _, tp := range d.Mirrors[0].Topics {
				if tp.Name == "payments" {
					return len(tp.Partitions) == 1 && tp.Partitions[0].State == "STOPPED", r.stdout
				}
			}
			return false, r.stdout
		})
		admin("--apply", "-f", failover).want(t, 0, "No changes")
	})
	t.Run("export then apply round-trips", func(t *testing.T) {
		exported := filepath.Join(dir, "exported.yaml")
		admin("--export", "-f", exported).want(t, 0, "Wrote 1 mirror")
		raw, err := os.ReadFile(exported)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"name: dr", "bootstrap.servers: " + src.BootstrapString(), "- orders", "failed_over:\n      - payments", "fetch.wait.max.ms: \"100\""} {
			if !strings.Contains(string(raw), want) {
				t.Errorf("export lacks %q:\n%s", want, raw)
			}
		}
		admin("--apply", "-f", exported).want(t, 0, "No changes")
	})
	t.Logf("wall time %s", time.Since(began).Round(time.Second))
}

// cliRun is one in-process `kmirror mirrors` run.
type cliRun struct {
	code           int
	stdout, stderr string
}

func (r cliRun) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

func (r cliRun) want(t *testing.T, code int, stdout ...string) cliRun {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Fatalf("stdout lacks %q:\n%s", s, r)
		}
	}
	return r
}

func (r cliRun) wantErr(t *testing.T, s string) cliRun {
	t.Helper()
	if !strings.Contains(r.stderr, s) {
		t.Fatalf("stderr lacks %q:\n%s", s, r)
	}
	return r
}

func (r cliRun) wantNot(t *testing.T, s string) cliRun {
	t.Helper()
	if strings.Contains(r.stdout, s) {
		t.Fatalf("stdout has %q:\n%s", s, r)
	}
	return r
}

func runMirrorsCLI(t *testing.T, args ...string) cliRun {
	t.Helper()
	var out, errw bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := mirrorcli.Mirrors(ctx, args, &out, &errw)
	r := cliRun{stdout: out.String(), stderr: errw.String()}
	if err != nil {
		r.code = 1
		if mirrorcli.IsUsage(err) {
			r.code = 2
		}
		r.stderr += err.Error() + "\n"
	}
	return r
}

func writeTestFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
