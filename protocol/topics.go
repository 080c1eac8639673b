package protocol

import (
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Element types shared by several mirror RPCs whose topics have the same
// shape. Sharing them lets a handler build per-topic results for Remove,
// Pause and Resume with one helper. If one RPC's topic grows a field in a
// later version, it gets its own type then.

// TopicName names a topic in RemoveTopicsFromMirror, PauseMirrorTopics and
// ResumeMirrorTopics requests.
type TopicName struct {
	Name        string
	UnknownTags kmsg.Tags
}

func (v *TopicName) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	return appendTags(dst, &v.UnknownTags)
}

func (v *TopicName) readFrom(d *decoder) {
	v.Name = d.string()
	d.tags(&v.UnknownTags, nil)
}

// TopicPartitions names partitions of a topic in LastMirroredOffsets and
// ReadMirrorState requests.
type TopicPartitions struct {
	Name        string
	Partitions  []int32
	UnknownTags kmsg.Tags
}

func (v *TopicPartitions) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = appendInt32s(dst, v.Partitions)
	return appendTags(dst, &v.UnknownTags)
}

func (v *TopicPartitions) readFrom(d *decoder) {
	v.Name = d.string()
	v.Partitions = d.int32s()
	d.tags(&v.UnknownTags, nil)
}

// TopicResult is the per-topic outcome in AddTopicsToMirror,
// RemoveTopicsFromMirror, PauseMirrorTopics and ResumeMirrorTopics
// responses.
type TopicResult struct {
	Name         string
	ErrorCode    int16
	ErrorMessage *string
	UnknownTags  kmsg.Tags
}

func (v *TopicResult) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	dst = appendNullableString(dst, v.ErrorMessage)
	return appendTags(dst, &v.UnknownTags)
}

func (v *TopicResult) readFrom(d *decoder) {
	v.Name = d.string()
	v.ErrorCode = d.int16()
	v.ErrorMessage = d.nullableString()
	d.tags(&v.UnknownTags, nil)
}

// NewTopicResult returns the result for one topic: success for a nil error,
// else the error's code and message (see ErrorCodeAndMessage).
func NewTopicResult(name string, err error) TopicResult {
	code, msg := ErrorCodeAndMessage(err)
	return TopicResult{Name: name, ErrorCode: code, ErrorMessage: msg}
}

// appendResponseHead writes the fields every mirror response starts with.
func appendResponseHead(dst []byte, throttleMillis int32, errorCode int16, errorMessage *string) []byte {
	dst = kbin.AppendInt32(dst, throttleMillis)
	dst = kbin.AppendInt16(dst, errorCode)
	return appendNullableString(dst, errorMessage)
}

func (d *decoder) responseHead(throttleMillis *int32, errorCode *int16, errorMessage **string) {
	*throttleMillis = d.int32()
	*errorCode = d.int16()
	*errorMessage = d.nullableString()
}

// appendMirrorTopics writes the body shared by Pause and Resume requests.
func appendMirrorTopics(dst []byte, mirrorName string, topics []TopicName, unknown *kmsg.Tags) []byte {
	dst = appendString(dst, mirrorName)
	dst = appendArray(dst, topics)
	return appendTags(dst, unknown)
}

func (d *decoder) mirrorTopics(mirrorName *string, topics *[]TopicName, unknown *kmsg.Tags) {
	*mirrorName = d.string()
	*topics = readArray[TopicName](d)
	d.tags(unknown, nil)
}

// appendTopicResults writes the body shared by the Add, Remove, Pause and
// Resume responses.
func appendTopicResults(dst []byte, throttleMillis int32, errorCode int16, errorMessage *string, topics []TopicResult, unknown *kmsg.Tags) []byte {
	dst = appendResponseHead(dst, throttleMillis, errorCode, errorMessage)
	dst = appendArray(dst, topics)
	return appendTags(dst, unknown)
}

func (d *decoder) topicResults(throttleMillis *int32, errorCode *int16, errorMessage **string, topics *[]TopicResult, unknown *kmsg.Tags) {
	d.responseHead(throttleMillis, errorCode, errorMessage)
	*topics = readArray[TopicResult](d)
	d.tags(unknown, nil)
}
