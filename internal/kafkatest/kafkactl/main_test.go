package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

// `kafka.sh start NAME --sasl` prints the bootstrap address on its last line and writes the
// users' client properties into the directory `kafka.sh dir NAME` prints; the address is a
// SASL listener at which alice authenticates.
func TestStartSASLWritesPropertiesFiles(t *testing.T) {
	kafkatest.RequireReal(t)
	t.Setenv("KMIRROR_KAFKA_STATE", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"start", "sasl", "--sasl"}, &out); err != nil {
		t.Fatalf("start --sasl: %v", err)
	}
	t.Cleanup(func() {
		if err := run(context.Background(), []string{"stop", "sasl"}, &bytes.Buffer{}); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	bootstrap := lines[len(lines)-1]

	out.Reset()
	if err := run(ctx, []string{"dir", "sasl"}, &out); err != nil {
		t.Fatalf("dir: %v", err)
	}
	dir := strings.TrimSpace(out.String())
	if want := filepath.Join(os.Getenv("KMIRROR_KAFKA_STATE"), "sasl"); dir != want {
		t.Fatalf("dir printed %q, want %q", dir, want)
	}
	for _, user := range []string{kafkatest.AdminUser, kafkatest.KmirrorUser, kafkatest.AliceUser} {
		got, err := os.ReadFile(filepath.Join(dir, user+".properties"))
		if err != nil {
			t.Fatal(err)
		}
		want := kafkatest.ClientProperties(kafkatest.User{Name: user, Password: user + "-secret"}, kafkatest.MechanismSCRAM)
		if string(got) != want {
			t.Fatalf("%s.properties:\n%s\nwant:\n%s", user, got, want)
		}
	}

	for pass, want := range map[string]error{"alice-secret": nil, "wrong": kerr.SaslAuthenticationFailed} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.RequestRetries(0),
			kgo.SASL(scram.Auth{User: kafkatest.AliceUser, Pass: pass}.AsSha512Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		cl.Close()
		if !errors.Is(err, want) {
			t.Fatalf("alice with password %q at %s: %v, want %v", pass, bootstrap, err, want)
		}
	}

	if err := run(ctx, []string{"dir", "absent"}, &bytes.Buffer{}); err == nil {
		t.Fatal("dir of a cluster that is not running succeeded")
	}
}
