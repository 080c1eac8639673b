package protocol

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestErrorTable(t *testing.T) {
	want := map[int16]string{
		3: "UNKNOWN_TOPIC_OR_PARTITION", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
		29: "TOPIC_AUTHORIZATION_FAILED", 40: "INVALID_CONFIG", 42: "INVALID_REQUEST", 44: "POLICY_VIOLATION",
		134: "READ_ONLY_TOPIC", 136: "MIRROR_ALREADY_EXISTS", 137: "UNKNOWN_MIRROR", 138: "TOPIC_ALREADY_IN_MIRROR",
		139: "TOPIC_NOT_IN_MIRROR", 141: "MIRROR_TOPIC_NOT_PAUSED", 142: "MIRROR_TOPIC_BEING_STOPPED",
		143: "MIRROR_NOT_EMPTY", 144: "MIRROR_AUTHORIZATION_FAILED", 145: "INVALID_MIRROR_STATE", 146: "MIRROR_TOPIC_NOT_STOPPED",
	}
	all := Errors()
	if len(all) != len(want) {
		t.Fatalf("%d errors, want %d", len(all), len(want))
	}
	for _, e := range all {
		if want[e.Code] != e.Name {
			t.Errorf("code %d is %s, want %s", e.Code, e.Name, want[e.Code])
		}
		if !strings.HasSuffix(e.Message, ".") || len(e.Message) < 40 {
			t.Errorf("%s: message %q is not a sentence a person can act on", e.Name, e.Message)
		}
		// Reused Kafka codes must agree with Kafka on name and retriability.
		if e.Code < 134 {
			ke := kerr.TypedErrorForCode(e.Code)
			if ke.Message != e.Name || ke.Retriable != e.Retriable {
				t.Errorf("%s: kerr says %s retriable=%v", e.Name, ke.Message, ke.Retriable)
			}
		}
	}
}

func TestErrorForCode(t *testing.T) {
	if ErrorForCode(0) != nil {
		t.Fatal("code 0 is not an error")
	}
	if e := ErrorForCode(137); e.Name != "UNKNOWN_MIRROR" || e == ErrUnknownMirror {
		t.Fatalf("137: %+v (must be a copy)", e)
	}
	// 136 is CONTROLLER_ID_NOT_REGISTERED in Kafka; ours wins here.
	if e := ErrorForCode(136); e.Name != "MIRROR_ALREADY_EXISTS" {
		t.Fatalf("136: %+v", e)
	}
	if e := ErrorForCode(35); e.Name != "UNSUPPORTED_VERSION" || e.Code != 35 {
		t.Fatalf("35 from kerr: %+v", e)
	}
	if e := ErrorForCode(-1); e.Name != "UNKNOWN_SERVER_ERROR" {
		t.Fatalf("-1 from kerr: %+v", e)
	}
	if e := ErrorForCode(31000); e.Name != "UNKNOWN_ERROR_CODE_31000" || e.Retriable || e.Message == "" {
		t.Fatalf("unknown: %+v", e)
	}
}

func TestWithMessageAndIs(t *testing.T) {
	e := ErrUnknownMirror.WithMessage("mirror %q does not exist; list mirrors with `kmirror mirrors --list`", "dr")
	if e.Message != "mirror \"dr\" does not exist; list mirrors with `kmirror mirrors --list`" || e.Code != 137 {
		t.Fatalf("%+v", e)
	}
	if ErrUnknownMirror.Message == e.Message {
		t.Fatal("WithMessage changed the template")
	}
	wrapped := fmt.Errorf("adding topics: %w", e)
	if !errors.Is(wrapped, ErrUnknownMirror) || errors.Is(wrapped, ErrTopicNotInMirror) {
		t.Fatal("errors.Is does not match by code")
	}
	if !errors.Is(ErrPolicyViolation, kerr.PolicyViolation) {
		t.Fatal("reused code does not match kerr")
	}
	if errors.Is(ErrReadOnlyTopic, kerr.GroupDeletionFailed) {
		t.Fatal("134 matched Kafka's GROUP_DELETION_FAILED")
	}
	if got := e.Error(); got != "UNKNOWN_MIRROR: "+e.Message {
		t.Fatalf("Error() = %q", got)
	}
}

func TestResponseErrorRoundTrip(t *testing.T) {
	if ResponseError(0, strp("ignored")) != nil {
		t.Fatal("code 0 gave an error")
	}
	code, msg := ErrorCodeAndMessage(fmt.Errorf("ctx: %w", ErrMirrorNotEmpty.WithMessage("orders is MIRRORING")))
	if code != 143 || *msg != "orders is MIRRORING" {
		t.Fatalf("%d %q", code, *msg)
	}
	err := ResponseError(code, msg)
	if !errors.Is(err, ErrMirrorNotEmpty) || err.Error() != "MIRROR_NOT_EMPTY: orders is MIRRORING" {
		t.Fatalf("%v", err)
	}
	if err := ResponseError(137, nil); err.Error() != ErrUnknownMirror.Error() {
		t.Fatalf("default message not used: %v", err)
	}
	if code, msg := ErrorCodeAndMessage(nil); code != 0 || msg != nil {
		t.Fatal("nil error")
	}
	if code, _ := ErrorCodeAndMessage(kerr.NotCoordinator); code != 16 {
		t.Fatalf("kerr: %d", code)
	}
	if code, msg := ErrorCodeAndMessage(errors.New("disk on fire")); code != -1 || *msg != "disk on fire" {
		t.Fatalf("plain: %d %q", code, *msg)
	}
	if r := NewTopicResult("t", ErrTopicNotInMirror); r.ErrorCode != 139 || *r.ErrorMessage != ErrTopicNotInMirror.Message {
		t.Fatalf("%+v", r)
	}
	if r := NewTopicResult("t", nil); r.ErrorCode != 0 || r.ErrorMessage != nil {
		t.Fatalf("%+v", r)
	}
}
