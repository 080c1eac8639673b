package mirrorcli

import (
	"strings"
	"testing"
)

// --alter changes a mirror's configs while it exists and --describe
// --configs shows them, defaults included; keys naming the source stay
// fixed and bad input gets a usage error.
func TestAlterAndDescribeConfigs(t *testing.T) {
	s := startServer(t)
	bs := []string{"--bootstrap-server", s.addr()}
	run := func(args ...string) result {
		t.Helper()
		return runMirrors(t, append(append([]string{}, bs...), args...)...)
	}
	cfg := writeFile(t, "dr.properties", "bootstrap.servers="+s.src.BootstrapString()+"\n")
	mustRun(t, 0, run("--create", "--mirror", "dr", "--mirror-config", cfg))

	r := mustRun(t, 0, run("--alter", "--mirror", "dr", "--add-config", "replication.throttled.rate=500000,fetch.wait.max.ms=50"))
	mustContain(t, "alter output", r.stdout, "Changed 2 configs of mirror dr")
	r = mustRun(t, 0, run("--describe", "--mirror", "dr", "--configs"))
	row := func(key string) string {
		for _, l := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == key {
				return l
			}
		}
		t.Fatalf("no %s row in:\n%s", key, r.stdout)
		return ""
	}
	if l := row("replication.throttled.rate"); !strings.Contains(l, "500000") || !strings.Contains(l, "set") {
		t.Fatalf("rate row %q", l)
	}
	if l := row("bootstrap.servers"); !strings.Contains(l, "fixed") {
		t.Fatalf("bootstrap.servers row %q: want it marked fixed", l)
	}
	if l := row("metadata.refresh.interval.ms"); !strings.Contains(l, "30000") || !strings.Contains(l, "default") {
		t.Fatalf("a default's row %q", l)
	}

	mustRun(t, 0, run("--alter", "--mirror", "dr", "--delete-config", "replication.throttled.rate"))
	r = mustRun(t, 0, run("--describe", "--mirror", "dr", "--configs"))
	if l := row("replication.throttled.rate"); !strings.Contains(l, "default") {
		t.Fatalf("after --delete-config: %q", l)
	}

	r = mustRun(t, 1, run("--alter", "--mirror", "dr", "--add-config", "bootstrap.servers=elsewhere:9092"))
	mustContain(t, "connection key", r.stderr, "INVALID_CONFIG", "cannot change while the mirror exists")
	r = mustRun(t, 1, run("--alter", "--mirror", "nope", "--add-config", "replication.throttled.rate=1"))
	mustContain(t, "unknown mirror", r.stderr, "UNKNOWN_MIRROR")
	r = mustRun(t, 2, run("--alter", "--mirror", "dr"))
	mustContain(t, "nothing to alter", r.stderr, "--alter needs --add-config")
	r = mustRun(t, 2, run("--alter", "--mirror", "dr", "--add-config", "oops"))
	mustContain(t, "bad pair", r.stderr, "KEY=VALUE")
	r = mustRun(t, 2, run("--describe", "--configs"))
	mustContain(t, "configs without mirror", r.stderr, "--describe --configs needs --mirror")

	// A long value is shortened to fit a terminal, --full shows it whole.
	long := "orders-[a-z]+," + strings.Repeat("payments-v[0-9]+,", 15) + "logs-.*"
	mustRun(t, 0, run("--alter", "--mirror", "dr", "--add-config", "topics.exclude=x", "--mirror-config",
		writeFile(t, "long.properties", "topics.include="+long+"\n")))
	r = mustRun(t, 0, run("--describe", "--mirror", "dr", "--configs"))
	if l := row("topics.include"); strings.Contains(l, long) || !strings.Contains(l, "…") {
		t.Fatalf("long value not shortened: %q", l)
	}
	mustContain(t, "shortened note", r.stdout, "--full prints them whole")
	r = mustRun(t, 0, run("--describe", "--mirror", "dr", "--configs", "--full"))
	if l := row("topics.include"); !strings.Contains(l, long) {
		t.Fatalf("--full: %q", l)
	}

	// An unknown mirror prints its error alone, no empty table.
	r = mustRun(t, 1, run("--describe", "--mirror", "nope"))
	if r.stdout != "" {
		t.Fatalf("describe of an unknown mirror printed a table:\n%s", r)
	}
	mustContain(t, "unknown mirror", r.stderr, "UNKNOWN_MIRROR", "1 of 1 mirror could not be described")
}
