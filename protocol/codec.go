package protocol

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file holds the flexible-version (KIP-482) encoding shared by every
// mirror message: compact strings and arrays, and tagged-field sections.
//
// Decoding wraps kbin.Reader, which already refuses spans longer than the
// input, and adds what it leaves out: array counts are bounded by the bytes
// left divided by the smallest encoding of one element before anything is
// allocated, nulls in non-nullable fields and duplicate tags are errors, and
// so is anything left over after a message.

// ErrMalformedMessage is returned (wrapped) when a request or response body
// cannot be decoded: truncated, over-long, a null where none is allowed,
// duplicate tags, or bytes left over after the message.
var ErrMalformedMessage = errors.New("protocol: malformed message")

// errEndsEarly replaces kbin.ErrNotEnoughData, whose text speaks of a
// response even when a request was short.
var errEndsEarly = fmt.Errorf("input ends in the middle of a field: %w", io.ErrUnexpectedEOF)

// maxStringLen is Kafka's limit for STRING and COMPACT_STRING: the Java
// decoders refuse longer strings, so accepting them here would let a request
// pass the proxy that no broker would take.
const maxStringLen = math.MaxInt16

// decoder reads one message. After the first failure every read returns a
// zero value, so message code reads straight through and checks once.
type decoder struct {
	r   kbin.Reader
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformedMessage, fmt.Sprintf(format, args...))
	}
	d.r.Src = nil
}

func (d *decoder) ok() bool { return d.err == nil && d.r.Ok() }

// finish reports the first error, or bytes the message did not account for.
func (d *decoder) finish() error {
	switch {
	case d.err != nil:
		return d.err
	case !d.r.Ok():
		return fmt.Errorf("%w: %w", ErrMalformedMessage, errEndsEarly)
	case len(d.r.Src) > 0:
		return fmt.Errorf("%w: %d unexpected bytes after the message", ErrMalformedMessage, len(d.r.Src))
	}
	return nil
}

func (d *decoder) bool() bool          { return d.r.Bool() }
func (d *decoder) int8() int8          { return d.r.Int8() }
func (d *decoder) int16() int16        { return d.r.Int16() }
func (d *decoder) int32() int32        { return d.r.Int32() }
func (d *decoder) int64() int64        { return d.r.Int64() }
func (d *decoder) uuid() [16]byte      { return d.r.Uuid() }
func (d *decoder) remaining() int      { return len(d.r.Src) }
func (d *decoder) compactLen() int64   { return int64(d.r.Uvarint()) - 1 }
func (d *decoder) span(n int64) []byte { return d.r.Span(int(min(n, math.MaxInt32))) }

// string reads a non-nullable COMPACT_STRING.
func (d *decoder) string() string {
	n := d.compactLen()
	if n < 0 {
		if d.ok() {
			d.fail("null in a non-nullable string")
		}
		return ""
	}
	if n > maxStringLen {
		d.fail("string of %d bytes exceeds Kafka's limit of %d", n, maxStringLen)
		return ""
	}
	return string(d.span(n))
}

// nullableString reads a COMPACT_NULLABLE_STRING.
func (d *decoder) nullableString() *string {
	n := d.compactLen()
	if n < 0 {
		return nil
	}
	if n > maxStringLen {
		d.fail("string of %d bytes exceeds Kafka's limit of %d", n, maxStringLen)
		return nil
	}
	s := string(d.span(n))
	if !d.ok() {
		return nil
	}
	return &s
}

// arrayLen reads a non-nullable COMPACT_ARRAY length and checks that the
// input can hold that many elements of at least minSize bytes each.
func (d *decoder) arrayLen(minSize int) int {
	n := d.compactLen()
	switch {
	case !d.ok():
		return 0
	case n < 0:
		d.fail("null in a non-nullable array")
		return 0
	case n > int64(d.remaining()/minSize):
		d.fail("array claims %d elements of at least %d bytes, but only %d bytes remain", n, minSize, d.remaining())
		return 0
	}
	return int(n)
}

// readSlice reads a non-nullable COMPACT_ARRAY whose elements take at
// least minSize bytes each, each read by read. Empty arrays decode as nil
// so that nil and empty, which encode identically, also decode identically.
func readSlice[T any](d *decoder, minSize int, read func() T) []T {
	n := d.arrayLen(minSize)
	if n == 0 {
		return nil
	}
	s := make([]T, n)
	for i := range s {
		s[i] = read()
	}
	if !d.ok() {
		return nil
	}
	return s
}

// strings reads a non-nullable array of strings; empty decodes as nil.
func (d *decoder) strings() []string { return readSlice(d, 1, d.string) }

// int32s reads a non-nullable array of int32; empty decodes as nil.
func (d *decoder) int32s() []int32 { return readSlice(d, 4, d.int32) }

// tags reads a tagged-field section. Tags that known decodes (it returns
// true) are read from their own sub-decoder, which must consume the tag's
// bytes exactly; all others are kept in unknown so they survive a
// decode/encode round trip. A tag seen twice is an error: which one a
// broker would honour is not specified.
func (d *decoder) tags(unknown *kmsg.Tags, known func(tag uint32, fd *decoder) bool) {
	*unknown = kmsg.Tags{}
	n := d.r.Uvarint()
	if !d.ok() || n == 0 {
		return
	}
	if int64(n) > int64(d.remaining()/2) { // a tag is at least a key byte and a size byte
		d.fail("tag section claims %d tags, but only %d bytes remain", n, d.remaining())
		return
	}
	var seenKnown uint64 // known tags are small numbers; bit per tag
	for range n {
		tag := d.r.Uvarint()
		val := d.span(int64(d.r.Uvarint()))
		if !d.ok() {
			return
		}
		fd := decoder{r: kbin.Reader{Src: val}}
		if known != nil && tag < 64 && known(tag, &fd) {
			if seenKnown&(1<<tag) != 0 {
				d.fail("tag %d appears twice", tag)
				return
			}
			seenKnown |= 1 << tag
			if err := fd.finish(); err != nil {
				d.err = fmt.Errorf("tagged field %d: %w", tag, err)
				d.r.Src = nil
				return
			}
			continue
		}
		before := unknown.Len()
		// Copied: the message must not alias a frame buffer the caller
		// may reuse (strings are copied for the same reason).
		unknown.Set(tag, bytes.Clone(val))
		if unknown.Len() == before {
			d.fail("tag %d appears twice", tag)
			return
		}
	}
}

// element is a struct nested in a message: it encodes and decodes itself,
// including its own tagged-field section.
type element[T any] interface {
	*T
	appendTo(dst []byte) []byte
	readFrom(d *decoder)
}

// smallester is an element whose zero value is not its smallest encoding:
// a tagged field whose default (left out on the wire) is not Go's zero.
type smallester interface{ smallest() }

// readArray reads a non-nullable COMPACT_ARRAY of structs. The element
// count is bounded by the encoded size of a zero element, which is the
// smallest any element can be (after smallest(), for elements with
// non-zero tagged defaults). Empty arrays decode as nil.
func readArray[T any, P element[T]](d *decoder) []T {
	var zero T
	if s, ok := any(P(&zero)).(smallester); ok {
		s.smallest()
	}
	return readSlice(d, len(P(&zero).appendTo(nil)), func() (v T) {
		P(&v).readFrom(d)
		return v
	})
}

// message is a top-level request or response of this package.
type message[T any] interface {
	*T
	Key() int16
	GetVersion() int16
	SetVersion(int16)
	readFrom(d *decoder)
}

// readMessage decodes src into v. v is replaced only on success, so a
// failed decode never leaves a half-filled message behind.
func readMessage[T any, P message[T]](v P, src []byte) error {
	version := v.GetVersion()
	if err := checkVersion(v.Key(), version); err != nil {
		return err
	}
	var m T
	P(&m).SetVersion(version)
	d := decoder{r: kbin.Reader{Src: src}}
	P(&m).readFrom(&d)
	if err := d.finish(); err != nil {
		return fmt.Errorf("protocol: decoding %T v%d: %w", v, version, err)
	}
	*v = m
	return nil
}

func appendString(dst []byte, s string) []byte { return kbin.AppendCompactString(dst, s) }

func appendNullableString(dst []byte, s *string) []byte {
	return kbin.AppendCompactNullableString(dst, s)
}

func appendStrings(dst []byte, s []string) []byte {
	return appendSlice(dst, s, kbin.AppendCompactString)
}

func appendInt32s(dst []byte, s []int32) []byte { return appendSlice(dst, s, kbin.AppendInt32) }

// appendSlice writes a non-nullable COMPACT_ARRAY of scalars.
func appendSlice[T any](dst []byte, s []T, add func([]byte, T) []byte) []byte {
	dst = kbin.AppendCompactArrayLen(dst, len(s))
	for _, v := range s {
		dst = add(dst, v)
	}
	return dst
}

func appendArray[T any, P element[T]](dst []byte, s []T) []byte {
	dst = kbin.AppendCompactArrayLen(dst, len(s))
	for i := range s {
		dst = P(&s[i]).appendTo(dst)
	}
	return dst
}

// taggedField is a known tagged field of a struct. Fields at their default
// are not written (present=false), as in Kafka.
type taggedField struct {
	tag     uint32
	present bool
	append  func(dst []byte) []byte
}

// appendTags writes a tagged-field section: the present known fields and
// the unknown tags, merged in ascending tag order as KIP-482 serialises
// them. Unknown tags that reuse a known field's number are dropped: the
// decoder never produces them, and writing them would smuggle a second
// value for that field.
func appendTags(dst []byte, unknown *kmsg.Tags, known ...taggedField) []byte {
	if unknown.Len() == 0 && !slices.ContainsFunc(known, func(f taggedField) bool { return f.present }) {
		return append(dst, 0)
	}
	type entry struct {
		tag uint32
		val []byte
	}
	var entries []entry
	for _, f := range known {
		if f.present {
			entries = append(entries, entry{f.tag, f.append(nil)})
		}
	}
	unknown.Each(func(tag uint32, val []byte) {
		if !slices.ContainsFunc(known, func(f taggedField) bool { return f.tag == tag }) {
			entries = append(entries, entry{tag, val})
		}
	})
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.tag, b.tag) })
	dst = kbin.AppendUvarint(dst, uint32(len(entries)))
	for _, e := range entries {
		dst = kbin.AppendUvarint(dst, e.tag)
		dst = kbin.AppendUvarint(dst, uint32(len(e.val)))
		dst = append(dst, e.val...)
	}
	return dst
}
