package protocol

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Error is a Kafka error code with its name and a message a person can act
// on. Handlers return one (usually with WithMessage naming the mirror or
// topic) and the response carries Code and Message.
type Error struct {
	Code      int16
	Name      string
	Message   string
	Retriable bool
}

func (e *Error) Error() string { return e.Name + ": " + e.Message }

// Is makes errors.Is match by code, so a copy made by WithMessage still
// matches its template. It matches a kerr error only if the names agree as
// well: the proposal's codes 134..136 are different errors in Kafka.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		return t.Code == e.Code
	case *kerr.Error:
		return t.Code == e.Code && t.Message == e.Name
	}
	return false
}

// WithMessage returns a copy of e with a specific message, e.g.
// ErrUnknownMirror.WithMessage("mirror %q does not exist; ...", name).
func (e *Error) WithMessage(format string, args ...any) *Error {
	c := *e
	c.Message = fmt.Sprintf(format, args...)
	return &c
}

// Reused Kafka error codes. Messages say what to do next.
var (
	ErrUnknownTopicOrPartition  = &Error{3, "UNKNOWN_TOPIC_OR_PARTITION", "The topic or partition does not exist on this cluster; check the name, or create the topic first.", true}
	ErrCoordinatorNotAvailable  = &Error{15, "COORDINATOR_NOT_AVAILABLE", "No kmirror instance owns this mirror state yet (the group is rebalancing or __mirror_state is unavailable); retry shortly.", true}
	ErrNotCoordinator           = &Error{16, "NOT_COORDINATOR", "This kmirror instance no longer owns this mirror state; retry, and the request will reach the current owner.", true}
	ErrTopicAuthorizationFailed = &Error{29, "TOPIC_AUTHORIZATION_FAILED", "The caller is not authorized for this topic; grant the principal access to the topic.", false}
	ErrInvalidConfig            = &Error{40, "INVALID_CONFIG", "A mirror configuration is invalid; fix the named key and retry.", false}
	ErrInvalidRequest           = &Error{42, "INVALID_REQUEST", "The request is invalid; check the named field.", false}
	ErrPolicyViolation          = &Error{44, "POLICY_VIOLATION", "The request violates a mirror policy; a mirror topic is read-only until it is failed over (stopped).", false}
)

// Error codes added by Cluster Mirroring, numbered as in the proposal
// (135 and 140 are not used by kmirror).
var (
	ErrReadOnlyTopic             = &Error{134, "READ_ONLY_TOPIC", "The topic is a mirror topic and read-only until it is failed over; remove it from its mirror to make it writable.", false}
	ErrMirrorAlreadyExists       = &Error{136, "MIRROR_ALREADY_EXISTS", "A mirror with this name already exists; choose another name or describe the existing mirror.", false}
	ErrUnknownMirror             = &Error{137, "UNKNOWN_MIRROR", "The mirror does not exist; list mirrors to check the name.", false}
	ErrTopicAlreadyInMirror      = &Error{138, "TOPIC_ALREADY_IN_MIRROR", "The topic is already mirrored by another mirror; remove it from that mirror first.", false}
	ErrTopicNotInMirror          = &Error{139, "TOPIC_NOT_IN_MIRROR", "The topic is not part of this mirror; describe the mirror to see its topics.", false}
	ErrMirrorTopicNotPaused      = &Error{141, "MIRROR_TOPIC_NOT_PAUSED", "The mirror topic is not paused, so it cannot be resumed; describe the mirror to see its state.", false}
	ErrMirrorTopicBeingStopped   = &Error{142, "MIRROR_TOPIC_BEING_STOPPED", "The mirror topic is stopping or stopped and cannot be paused; add it to the mirror again to restart mirroring.", false}
	ErrMirrorNotEmpty            = &Error{143, "MIRROR_NOT_EMPTY", "The mirror still has topics that are not STOPPED; remove them from the mirror and wait for STOPPED before deleting it.", false}
	ErrMirrorAuthorizationFailed = &Error{144, "MIRROR_AUTHORIZATION_FAILED", "The caller is not authorized to act on this mirror; grant the principal access to the mirror.", false}
	ErrInvalidMirrorState        = &Error{145, "INVALID_MIRROR_STATE", "The operation is not valid in the partition's current mirror state; describe the mirror to see the state.", false}
	ErrMirrorTopicNotStopped     = &Error{146, "MIRROR_TOPIC_NOT_STOPPED", "The topic is already in this mirror and not STOPPED; describe the mirror, or remove the topic and wait for STOPPED before adding it again.", false}
)

// errorTable lists every code this package defines; ErrorForCode looks here
// before kerr, because the proposal's codes 134 and 136 mean something else
// in Kafka.
var errorTable = []*Error{
	ErrUnknownTopicOrPartition, ErrCoordinatorNotAvailable, ErrNotCoordinator,
	ErrTopicAuthorizationFailed, ErrInvalidConfig, ErrInvalidRequest, ErrPolicyViolation,
	ErrReadOnlyTopic, ErrMirrorAlreadyExists, ErrUnknownMirror, ErrTopicAlreadyInMirror,
	ErrTopicNotInMirror, ErrMirrorTopicNotPaused, ErrMirrorTopicBeingStopped, ErrMirrorNotEmpty,
	ErrMirrorAuthorizationFailed, ErrInvalidMirrorState, ErrMirrorTopicNotStopped,
}

// Errors returns a copy of every error this package defines, for
// documentation and tests.
func Errors() []Error {
	out := make([]Error, len(errorTable))
	for i, e := range errorTable {
		out[i] = *e
	}
	return out
}

// ErrorForCode returns a fresh *Error for code with its default message, or
// nil for 0. Codes this package does not define come from kerr if it knows
// them, else a generic UNKNOWN_ERROR_CODE_<n>.
//
// The result is a typed pointer: assign it to an error variable only when
// it is non-nil (or use ResponseError).
func ErrorForCode(code int16) *Error {
	if code == 0 {
		return nil
	}
	for _, e := range errorTable {
		if e.Code == code {
			c := *e
			return &c
		}
	}
	if ke := kerr.TypedErrorForCode(code); ke != nil && ke.Code == code {
		return &Error{Code: code, Name: ke.Message, Message: ke.Description, Retriable: ke.Retriable}
	}
	return &Error{
		Code:    code,
		Name:    fmt.Sprintf("UNKNOWN_ERROR_CODE_%d", code),
		Message: fmt.Sprintf("The server returned error code %d, which this kmirror build does not know; check that client and proxy run the same kmirror version.", code),
	}
}

// ResponseError turns a response's ErrorCode and ErrorMessage into an error:
// nil for 0, else ErrorForCode with the server's message when it sent one.
func ResponseError(code int16, message *string) error {
	e := ErrorForCode(code)
	if e == nil {
		return nil
	}
	if message != nil && *message != "" {
		e.Message = *message
	}
	return e
}

// ErrorCodeAndMessage is the inverse of ResponseError, for handlers filling
// a response: nil gives (0, nil); an *Error or kerr error gives its code and
// message; any other error is reported as UNKNOWN_SERVER_ERROR (-1) with
// its text, so the caller still sees what went wrong.
func ErrorCodeAndMessage(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code, &e.Message
	}
	msg := err.Error()
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return ke.Code, &msg
	}
	return kerr.UnknownServerError.Code, &msg
}

// NewTopicResult returns the result for one topic: success for a nil error,
// else the error's code and message (see ErrorCodeAndMessage).
func NewTopicResult(name string, err error) TopicResult {
	code, msg := ErrorCodeAndMessage(err)
	return TopicResult{Name: name, ErrorCode: code, ErrorMessage: msg}
}
