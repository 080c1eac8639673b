package protocol

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// v0Mirror is a DescribeMirrors mirror entry as v0 first shipped, before
// the sync fields: a client built then must still decode a response that
// carries them.
type v0Mirror struct {
	Name         string
	ErrorCode    int16
	ErrorMessage *string
	Topics       []DescribeMirrorsResponseTopic
	UnknownTags  kmsg.Tags
}

func (v *v0Mirror) appendTo(dst []byte) []byte {
	dst = appendString(dst, v.Name)
	dst = kbin.AppendInt16(dst, v.ErrorCode)
	dst = appendNullableString(dst, v.ErrorMessage)
	dst = appendArray(dst, v.Topics)
	return appendTags(dst, &v.UnknownTags)
}

func (v *v0Mirror) readFrom(d *decoder) {
	v.Name = d.string()
	v.ErrorCode = d.int16()
	v.ErrorMessage = d.nullableString()
	v.Topics = readArray[DescribeMirrorsResponseTopic](d)
	d.tags(&v.UnknownTags, nil)
}

func TestDescribeMirrorsSyncFieldsAreTagged(t *testing.T) {
	var full *DescribeMirrorsResponse
	for _, c := range roundTripCases() {
		if c.name == "DescribeMirrorsResponse/full" {
			full = c.msg.(*DescribeMirrorsResponse)
		}
	}
	if full == nil || len(full.Mirrors[0].Groups) == 0 || len(full.Mirrors[0].Syncs) == 0 {
		t.Fatal("the full DescribeMirrorsResponse case lost its sync fields")
	}
	d := decoder{r: kbin.Reader{Src: full.AppendTo(nil)}}
	skipResponseHead(&d)
	old := readArray[v0Mirror](&d)
	var tags kmsg.Tags
	d.tags(&tags, nil)
	if err := d.finish(); err != nil {
		t.Fatalf("a v0 client cannot decode the response: %v", err)
	}
	m := old[0]
	if m.Name != full.Mirrors[0].Name || !reflect.DeepEqual(m.Topics, full.Mirrors[0].Topics) {
		t.Fatalf("a v0 client reads %+v", m)
	}
	seen := map[uint32]bool{}
	m.UnknownTags.Each(func(tag uint32, _ []byte) { seen[tag] = true })
	if !seen[0] || !seen[1] || !seen[3] {
		t.Errorf("a v0 client sees tags %v on the mirror entry, want 0 (groups), 1 (syncs) and 3", seen)
	}
}
