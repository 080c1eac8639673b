package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/statetopic"
	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/instance/instancetest"
	"github.com/kmirror/kmirror/internal/kafkatest"
	"github.com/kmirror/kmirror/internal/polltest"
	"github.com/kmirror/kmirror/mirrorcli"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

const (
	switcher     = "route-switcher"
	switcherPass = "route-switcher-5e2a"
)

// TestRouteSwitchBackNeedsAlterOnThePrimarysKmirrorReal: a switch back ends with the kmirror in
// front of the primary failing its mirror back over, asked with the route's mirror's source
// credentials (docs/cutover.md, "Switching back"). The primary is a SASL cluster with the
// StandardAuthorizer; the route's mirror reads it through its kmirror as a principal with
// what a mirror's source needs (alice's grants on topics, topic configs) and DESCRIBE on
// CLUSTER, so it lists the primary's kmirror's mirrors but may not fail one over. The switch
// back is then refused before anything is frozen, naming what is missing; the route stays on
// the standby, unfrozen. Granted ALTER on CLUSTER, the same request switches the route back.
func TestRouteSwitchBackNeedsAlterOnThePrimarysKmirrorReal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	primary := kafkatest.Start(t, kafkatest.WithSASL(), kafkatest.SASLUser(switcher, switcherPass))
	standby := kafkatest.Start(t)
	atPrimary := startSASLInstance(t, primary, filepath.Join(t.TempDir(), "audit.log"))
	atStandby := instancetest.Start(t, standby, nil, func(c *instance.Config) {
		c.Proxy.Routes = []proxy.RouteConfig{{Name: "app", Listen: "127.0.0.1:0", Mirror: "dr",
			Primary: proxy.RouteUpstream{Bootstrap: []string{atPrimary.Proxy.Addr()}}}}
	})
	grant(t, ctx, primary, kadm.NewACLs().Allow("User:"+switcher).Topics("*").ResourcePatternType(kadm.ACLPatternLiteral).
		Operations(kadm.OpDescribeConfigs))
	grant(t, ctx, primary, kadm.NewACLs().Allow("User:"+switcher).Clusters().Operations(kadm.OpDescribe))
	primary.CreateKeptTopic(t, "orders", 1)
	produce(t, primary, "orders", 1, 50, kgo.NoCompression())

	secretFile := filepath.Join(t.TempDir(), "source.properties")
	if err := os.WriteFile(secretFile, []byte("sasl.password="+switcherPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	atStandbyCl := kafkatest.NewClient(t, []string{atStandby.Proxy.Addr()}, kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	createMirror(t, atStandbyCl, "dr", "bootstrap.servers", atPrimary.Proxy.Addr(), "metadata.refresh.interval.ms", "1000",
		"security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", kafkatest.MechanismSCRAM,
		"sasl.username", switcher, "sasl.password", "${file:"+secretFile+":sasl.password}")
	addTopics(t, atStandbyCl, "dr", "orders")
	waitMirrored(t, atStandbyCl, "dr", map[string]int64{"orders": 50})
	if out, errOut, err := switchCLI(ctx, atStandby); err != nil || !strings.Contains(out, "switch of route app (attempt 1)") {
		t.Fatalf("the switch to the standby: %v %s %s", err, out, errOut)
	}
	waitRoute(t, atStandby, 1, statetopic.UpstreamStandby)

	// The mirror back, on the primary's kmirror, created by its admin: a failback from the
	// first mirror's last mirrored offsets.
	admin := saslClient(t, primary, atPrimary.Proxy.Addr(), kafkatest.AdminUser)
	createMirror(t, admin, "back", "bootstrap.servers", atStandby.Proxy.Addr(), "metadata.refresh.interval.ms", "1000")
	addTopics(t, admin, "back", "orders")

	out, errOut, err := switchCLI(ctx, atStandby)
	if err == nil || !strings.Contains(out+errOut+err.Error(), "would not let this kmirror fail mirror back over") ||
		!strings.Contains(out+errOut+err.Error(), "ALTER on CLUSTER") {
		t.Fatalf("a switch back the primary's kmirror would not let finish: %v %s %s", err, out, errOut)
	}
	var rec *statetopic.RouteSwitch
	atStandby.Coord.Store().Read(func(v *statetopic.View) { rec = v.RouteSwitch("app") })
	if rec.Attempt != 1 || rec.Step != statetopic.RouteSwitched || rec.Upstream != statetopic.UpstreamStandby {
		t.Fatalf("a refused switch back left the route at %+v", rec)
	}
	t.Logf("refused up front: %v", err)

	grant(t, ctx, primary, kadm.NewACLs().Allow("User:"+switcher).Clusters().Operations(kadm.OpAlter))
	if out, errOut, err := switchCLI(ctx, atStandby); err != nil || !strings.Contains(out, "switch of route app (attempt 2)") {
		t.Fatalf("the switch back, allowed: %v %s %s", err, out, errOut)
	}
	waitRoute(t, atStandby, 2, statetopic.UpstreamPrimary)
}

// grant creates acls on c as its admin.
func grant(t *testing.T, ctx context.Context, c *kafkatest.Cluster, acls *kadm.ACLBuilder) {
	t.Helper()
	acls.ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(c.Client(t)).CreateACLs(ctx, acls)
	if err == nil {
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatalf("granting ACLs: %v", err)
	}
}

// switchCLI runs `kmirror mirrors --switch --route app` against the instance.
func switchCLI(ctx context.Context, in *instance.Instance) (string, string, error) {
	var out, errOut strings.Builder
	err := mirrorcli.Mirrors(ctx, []string{"--bootstrap-server", in.Proxy.Addr(), "--switch", "--route", "app"}, &out, &errOut)
	return out.String(), errOut.String(), err
}

// waitRoute waits until route app's attempt is SWITCHED to upstream; a rollback fails t.
func waitRoute(t *testing.T, in *instance.Instance, attempt int32, upstream statetopic.Upstream) {
	t.Helper()
	polltest.Eventually(t, 2*time.Minute, "the route switched", func() (bool, string) {
		var rec *statetopic.RouteSwitch
		in.Coord.Store().Read(func(v *statetopic.View) { rec = v.RouteSwitch("app") })
		if rec == nil {
			return false, "no record"
		}
		if rec.Step == statetopic.RouteRolledBack {
			t.Fatalf("the switch rolled back: %s", rec.Reason)
		}
		return rec.Attempt == attempt && rec.Step == statetopic.RouteSwitched && rec.Upstream == upstream, rec.Step.String() + " " + rec.Reason
	})
}
