// Package kafkaauth turns Kafka's SASL settings (mechanism, user, password)
// into a franz-go mechanism, in one place for every client kmirror builds:
// the proxy's own upstream client, mirror source clients and the CLI.
package kafkaauth

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Mechanisms are the SASL mechanisms kmirror speaks.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// SASL returns the mechanism, or an error naming the ones supported.
func SASL(mechanism, user, pass string) (sasl.Mechanism, error) {
	switch mechanism {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("SASL mechanism %q is not supported (use one of %v)", mechanism, Mechanisms)
}
