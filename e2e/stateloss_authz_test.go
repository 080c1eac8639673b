package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/protocol"
)

// TestStateLossRecoveryNeedsAlterOnCluster: recovering a lost mirror state is a
// CreateMirror (RecoverState): on a real SASL destination with the StandardAuthorizer,
// an unauthenticated client and alice (no ALTER on CLUSTER) are refused and change
// nothing (the state stays lost); admin recovers it and mirroring continues.
func TestStateLossRecoveryNeedsAlterOnCluster(t *testing.T) {
	src := kafkatest.Start(t)
	dst := kafkatest.Start(t, kafkatest.WithSASL())
	in := startSASLInstance(t, dst, filepath.Join(t.TempDir(), "audit.log"))
	addr := in.Proxy.AdvertisedAddr()
	admin := saslClient(t, dst, addr, kafkatest.AdminUser)
	alice := saslClient(t, dst, addr, kafkatest.AliceUser)
	unauth := &rawClient{t: t, addr: addr}

	src.CreateKeptTopic(t, "orders", 1)
	produce(t, src, "orders", 1, 300, kgo.NoCompression())
	createMirror(t, admin, "dr", "bootstrap.servers", src.BootstrapString())
	addTopics(t, admin, "dr", "orders")
	waitMirrored(t, admin, "dr", map[string]int64{"orders": 300})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	directAdm := kadm.NewClient(dst.Client(t)) // admin, straight at the broker
	waitMarked(t, ctx, directAdm)
	if resps, err := directAdm.DeleteTopics(ctx, statetopic.TopicName); err != nil || resps.Error() != nil {
		t.Fatalf("deleting %s at the broker: %v %v", statetopic.TopicName, err, resps.Error())
	}
	stillLost := func(what string) {
		t.Helper()
		polltest.Eventually(t, time.Minute, what, func() (bool, string) {
			l := kgoRequest(t, admin)(protocol.NewPtrListMirrorsRequest()).(*protocol.ListMirrorsResponse)
			return l.ErrorCode == protocol.ErrInvalidMirrorState.Code && strings.Contains(deref(l.ErrorMessage), "MIRROR STATE LOST"),
				fmt.Sprintf("list %d %q", l.ErrorCode, deref(l.ErrorMessage))
		})
	}
	stillLost("the state reported lost")

	recover := &protocol.CreateMirrorRequest{MirrorName: "dr", RecoverState: true,
		Configs: []protocol.CreateMirrorRequestConfig{{Name: "bootstrap.servers", Value: kmsg.StringPtr(src.BootstrapString())}}}
	for _, c := range []struct {
		who  string
		send func(kmsg.Request) kmsg.Response
		code int16
		msg  string
	}{
		{"unauthenticated", unauth.request, 58, "CreateMirror refused: this kmirror answers only SASL-authenticated connections; authenticate with the destination's SASL mechanism first"},
		{"alice", kgoRequest(t, alice), 144, "ALTER on CLUSTER is required to create mirror dr (principal User:alice)"},
	} {
		if code, msg := outcome(c.send(recover)); code != c.code || msg != c.msg {
			t.Errorf("recover-state as %s: %d %q, want %d %q", c.who, code, msg, c.code, c.msg)
		}
	}
	stillLost("the state still lost after the refused recoveries")
	md, err := directAdm.Metadata(kadm.WithAuthorizedOps(ctx), statetopic.TopicName)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := md.Topics[statetopic.TopicName]; ok && st.Err == nil {
		t.Fatalf("a refused recovery re-created %s", statetopic.TopicName)
	}

	if code, msg := outcome(kgoRequest(t, admin)(recover)); code != 0 {
		t.Fatalf("recover-state as admin: %d %q", code, msg)
	}
	// Recovered on the running instance (its view restarted on the re-created topic).
	// Offset-by-offset identity after recovery is TestStateLoss's; here the copy
	// catching up with the source's high watermark is enough.
	produce(t, src, "orders", 1, 100, kgo.NoCompression())
	waitMirrored(t, admin, "dr", map[string]int64{"orders": 400})
}
