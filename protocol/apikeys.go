package protocol

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// API keys of the mirror RPCs. They follow the Cluster Mirroring proposal's
// prototype numbering so that a future Kafka admin client lines up; this
// block is the one place to change them.
//
// Key 94 is UnregisterController in newer Kafka (and in kmsg). That API is
// served only on controller listeners, which clients never reach through
// the proxy, so the proxy can still claim 94; everything in this package
// looks mirror keys up before kmsg.
const (
	KeyCreateMirror           int16 = 94
	KeyAddTopicsToMirror      int16 = 95
	KeyRemoveTopicsFromMirror int16 = 96
	KeyLastMirroredOffsets    int16 = 97
	KeyListMirrors            int16 = 98
	KeyDescribeMirrors        int16 = 99
	KeyReadMirrorState        int16 = 100
	KeyWriteMirrorState       int16 = 101
	KeyPauseMirrorTopics      int16 = 102
	KeyResumeMirrorTopics     int16 = 103
	KeyDeleteMirror           int16 = 104
)

// APIInfo describes one mirror RPC as advertised in ApiVersions.
type APIInfo struct {
	Key             int16
	Name            string
	MinVersion      int16
	MaxVersion      int16
	FlexibleVersion int16 // first flexible version; the mirror RPCs are flexible from v0

	newRequest  func() kmsg.Request
	newResponse func() kmsg.Response
}

// mirrorAPIs is the one table of mirror RPCs: keys, names, versions and the
// types that carry them.
var mirrorAPIs = []APIInfo{
	{KeyCreateMirror, "CreateMirror", 0, 0, 0,
		func() kmsg.Request { return NewPtrCreateMirrorRequest() }, func() kmsg.Response { return NewPtrCreateMirrorResponse() }},
	{KeyAddTopicsToMirror, "AddTopicsToMirror", 0, 0, 0,
		func() kmsg.Request { return NewPtrAddTopicsToMirrorRequest() }, func() kmsg.Response { return NewPtrAddTopicsToMirrorResponse() }},
	{KeyRemoveTopicsFromMirror, "RemoveTopicsFromMirror", 0, 0, 0,
		func() kmsg.Request { return NewPtrRemoveTopicsFromMirrorRequest() }, func() kmsg.Response { return NewPtrRemoveTopicsFromMirrorResponse() }},
	{KeyLastMirroredOffsets, "LastMirroredOffsets", 0, 0, 0,
		func() kmsg.Request { return NewPtrLastMirroredOffsetsRequest() }, func() kmsg.Response { return NewPtrLastMirroredOffsetsResponse() }},
	{KeyListMirrors, "ListMirrors", 0, 0, 0,
		func() kmsg.Request { return NewPtrListMirrorsRequest() }, func() kmsg.Response { return NewPtrListMirrorsResponse() }},
	{KeyDescribeMirrors, "DescribeMirrors", 0, 0, 0,
		func() kmsg.Request { return NewPtrDescribeMirrorsRequest() }, func() kmsg.Response { return NewPtrDescribeMirrorsResponse() }},
	{KeyReadMirrorState, "ReadMirrorState", 0, 0, 0,
		func() kmsg.Request { return NewPtrReadMirrorStateRequest() }, func() kmsg.Response { return NewPtrReadMirrorStateResponse() }},
	{KeyWriteMirrorState, "WriteMirrorState", 0, 0, 0,
		func() kmsg.Request { return NewPtrWriteMirrorStateRequest() }, func() kmsg.Response { return NewPtrWriteMirrorStateResponse() }},
	{KeyPauseMirrorTopics, "PauseMirrorTopics", 0, 0, 0,
		func() kmsg.Request { return NewPtrPauseMirrorTopicsRequest() }, func() kmsg.Response { return NewPtrPauseMirrorTopicsResponse() }},
	{KeyResumeMirrorTopics, "ResumeMirrorTopics", 0, 0, 0,
		func() kmsg.Request { return NewPtrResumeMirrorTopicsRequest() }, func() kmsg.Response { return NewPtrResumeMirrorTopicsResponse() }},
	{KeyDeleteMirror, "DeleteMirror", 0, 0, 0,
		func() kmsg.Request { return NewPtrDeleteMirrorRequest() }, func() kmsg.Response { return NewPtrDeleteMirrorResponse() }},
}

// MirrorAPIs returns a copy of the mirror RPC table, in key order, for
// ApiVersions advertisement and dispatch.
func MirrorAPIs() []APIInfo {
	return append([]APIInfo(nil), mirrorAPIs...)
}

// IsMirrorKey reports whether k is one of the mirror RPCs the proxy answers
// itself instead of forwarding.
func IsMirrorKey(k int16) bool {
	_, ok := mirrorAPI(k)
	return ok
}

func mirrorAPI(k int16) (*APIInfo, bool) {
	for i := range mirrorAPIs {
		if mirrorAPIs[i].Key == k {
			return &mirrorAPIs[i], true
		}
	}
	return nil, false
}

// APIName returns the name of a mirror RPC, or kmsg's name for a standard
// Kafka key ("Unknown" if kmsg does not know it either).
func APIName(k int16) string {
	if api, ok := mirrorAPI(k); ok {
		return api.Name
	}
	return kmsg.NameForKey(k)
}

// RequestForKey returns a new, default-valued request for a mirror key, or
// nil for any other key (use kmsg.RequestForKey for standard keys, after
// IsMirrorKey: the two overlap at 94).
func RequestForKey(key int16) kmsg.Request {
	if api, ok := mirrorAPI(key); ok {
		return api.newRequest()
	}
	return nil
}

// ResponseForKey is RequestForKey for responses.
func ResponseForKey(key int16) kmsg.Response {
	if api, ok := mirrorAPI(key); ok {
		return api.newResponse()
	}
	return nil
}

// maxVersion serves the MaxVersion methods of the mirror messages.
func maxVersion(k int16) int16 {
	api, _ := mirrorAPI(k)
	return api.MaxVersion
}

// checkVersion refuses to decode a version whose layout this package does
// not know, rather than guessing at it.
func checkVersion(k, version int16) error {
	api, _ := mirrorAPI(k)
	if version < api.MinVersion || version > api.MaxVersion {
		return fmt.Errorf("protocol: %s v%d is not supported (versions %d..%d)", api.Name, version, api.MinVersion, api.MaxVersion)
	}
	return nil
}
