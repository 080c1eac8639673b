package mirrorcli

import (
	"reflect"
	"testing"

	"github.com/kmirror/kmirror/protocol"
)

// TestTopError checks that topError reads the top-level error of every
// mirror RPC response.
func TestTopError(t *testing.T) {
	msg := "boom"
	for k := protocol.MinMirrorKey; k <= protocol.MaxMirrorKey; k++ {
		resp := protocol.ResponseForKey(k)
		v := reflect.ValueOf(resp).Elem()
		v.FieldByName("ErrorCode").SetInt(7)
		v.FieldByName("ErrorMessage").Set(reflect.ValueOf(&msg))
		if code, m := topError(resp); code != 7 || m == nil || *m != msg {
			t.Errorf("%s: topError = %d, %v", protocol.APIName(k), code, m)
		}
	}
}
