package instance

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/coordinator/secrets"
	"github.com/kmirror/kmirror/coordinator/sourceclient"
	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

// lineLog collects log lines for the test to read.
type lineLog struct{ lines []string }

func (l *lineLog) Write(p []byte) (int, error) {
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

// A secret that does not resolve on this instance fails Prepare with a
// retriable error that names the reference (the partition is retried, not
// failed for good), is logged once at ERROR, and Prepare succeeds once the
// file is there.
func TestPrepareRetriesUntilTheSecretResolves(t *testing.T) {
	src := kafkatest.Start(t, kafkatest.Fake())
	dst := kafkatest.Start(t, kafkatest.Fake())
	src.CreateKeptTopic(t, "orders", 1)
	var logs lineLog
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sources := sourceclient.NewCache().WithSecrets(secrets.NewResolver(nil), log)
	t.Cleanup(sources.Close)
	d := NewDataPath(sources, dst.Client(t), nil, log)
	file := filepath.Join(t.TempDir(), "source.properties")
	ref := "${file:" + file + ":sasl.password}"
	p := coordinator.PartitionRef{Mirror: "m", Topic: "orders", Config: &statetopic.MirrorConfig{Configs: map[string]string{
		"bootstrap.servers": src.BootstrapString(), "sasl.password": ref}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for range 2 {
		_, _, err := d.Prepare(ctx, p, nil)
		if err == nil || !datapath.Retriable(err) || !strings.Contains(err.Error(), ref) {
			t.Fatalf("Prepare without the file: %v (retriable %v)", err, datapath.Retriable(err))
		}
	}
	if n := strings.Count(strings.Join(logs.lines, ""), "level=ERROR"); n != 1 || !strings.Contains(logs.lines[0], ref) || !strings.Contains(logs.lines[0], "mirror=m") {
		t.Fatalf("want one ERROR naming the mirror and the reference, got %q", logs.lines)
	}
	if err := os.WriteFile(file, []byte("sasl.password=unused-on-plaintext\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Prepare(ctx, p, nil); err != nil {
		t.Fatalf("Prepare once the file is there: %v", err)
	}
}
